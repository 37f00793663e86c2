package share;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Drives a KafkaShareConsumer (KIP-932) in explicit acknowledgement mode, and the Admin
 * calls that say what the broker thinks of its group. One command a line on stdin, one
 * JSON object a line on stdout (errors too: {"error": "..."}), so a test runs every step
 * in one JVM:
 *
 * <pre>
 *   topic BOOTSTRAP TOPIC PARTITIONS        create a topic
 *   produce BOOTSTRAP TOPIC COUNT           values "0".."COUNT-1", value i to partition i % partitions
 *   earliest BOOTSTRAP GROUP                share.auto.offset.reset=earliest for the group
 *   renewable BOOTSTRAP GROUP               share.renew.acknowledge.enable=true for the group
 *   consume BOOTSTRAP GROUP TOPIC COUNT     a share consumer reads TOPIC until every value below
 *                                           COUNT was accepted or rejected (plan below); stays open
 *   describe BOOTSTRAP GROUP                Admin describeShareGroups and listShareGroupOffsets
 *   close                                   closes the share consumer
 * </pre>
 *
 * The plan, by value i: i % 10 == 3 is released on its first two deliveries and accepted
 * on the third; i % 10 == 5 is rejected; i % 10 == 7 is renewed (KIP-1222), then accepted
 * when the client hands it over again; every other value is accepted. After every other poll the
 * acknowledgements are sent with commitSync (ShareAcknowledge); the others go with the
 * next poll (ShareFetch). `consume` answers with every delivery the application saw
 * (topic, partition, offset, value, delivery count, what it did), in order.
 */
public final class ShareDriver {
    private static final ObjectMapper JSON = new ObjectMapper();
    private KafkaShareConsumer<String, String> consumer;

    public static void main(String[] args) throws Exception {
        // The answers go to stdout; anything else that writes there (the client's own
        // console logging) goes to stderr.
        java.io.PrintStream answers = new java.io.PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true, "UTF-8");
        System.setOut(System.err);
        ShareDriver driver = new ShareDriver();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] words = line.trim().split("\\s+");
            if (words.length == 0 || words[0].isEmpty()) {
                continue;
            }
            Object answer;
            try {
                answer = driver.run(words);
            } catch (Exception e) {
                Map<String, Object> error = new LinkedHashMap<>();
                error.put("error", e.toString());
                answer = error;
            }
            answers.println(JSON.writeValueAsString(answer));
        }
        driver.close();
    }

    private Object run(String[] w) throws Exception {
        switch (w[0]) {
            case "topic":
                return topic(w[1], w[2], Integer.parseInt(w[3]));
            case "produce":
                return produce(w[1], w[2], Integer.parseInt(w[3]));
            case "earliest":
                return groupConfig(w[1], w[2], "share.auto.offset.reset", "earliest");
            case "renewable":
                return groupConfig(w[1], w[2], "share.renew.acknowledge.enable", "true");
            case "consume":
                return consume(w[1], w[2], w[3], Integer.parseInt(w[4]));
            case "describe":
                return describe(w[1], w[2]);
            case "close":
                close();
                return Map.of("closed", true);
            default:
                throw new IllegalArgumentException("unknown command " + w[0]);
        }
    }

    private static Admin admin(String bootstrap) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("client.id", "share-driver-admin");
        return Admin.create(props);
    }

    private Object topic(String bootstrap, String topic, int partitions) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            admin.createTopics(List.of(new NewTopic(topic, Optional.of(partitions), Optional.empty()))).all().get();
        }
        return Map.of("created", topic);
    }

    private Object produce(String bootstrap, String topic, int count) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("acks", "all");
        props.put("client.id", "share-driver-producer");
        int partitions;
        List<Map<String, Object>> sent = new ArrayList<>();
        try (KafkaProducer<String, String> producer =
                new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
            partitions = producer.partitionsFor(topic).size();
            List<java.util.concurrent.Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                futures.add(producer.send(new ProducerRecord<>(topic, i % partitions, null, Integer.toString(i))));
            }
            producer.flush();
            for (int i = 0; i < count; i++) {
                RecordMetadata meta = futures.get(i).get();
                Map<String, Object> one = new LinkedHashMap<>();
                one.put("partition", meta.partition());
                one.put("offset", meta.offset());
                sent.add(one);
            }
        }
        return Map.of("produced", sent);
    }

    private Object groupConfig(String bootstrap, String group, String name, String value) throws Exception {
        ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
        AlterConfigOp op = new AlterConfigOp(new ConfigEntry(name, value), AlterConfigOp.OpType.SET);
        try (Admin admin = admin(bootstrap)) {
            admin.incrementalAlterConfigs(Map.of(resource, List.of(op))).all().get();
        }
        return Map.of("group", group);
    }

    private static AcknowledgeType plan(int value, short delivery) {
        switch (value % 10) {
            case 3:
                return delivery < 3 ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT;
            case 5:
                return AcknowledgeType.REJECT;
            default:
                return AcknowledgeType.ACCEPT;
        }
    }

    private Object consume(String bootstrap, String group, String topic, int count) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("client.id", "share-driver-" + group);
        props.put("share.acknowledgement.mode", "explicit");
        consumer = new KafkaShareConsumer<>(props, new StringDeserializer(), new StringDeserializer());
        consumer.subscribe(List.of(topic));
        Set<Integer> done = new HashSet<>();
        Set<String> seen = new HashSet<>(); // partition:offset:delivery count, to tell a replay
        List<Map<String, Object>> deliveries = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 90_000;
        int polls = 0;
        while (done.size() < count && System.currentTimeMillis() < deadline) {
            boolean renewing = false;
            for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(500))) {
                int value = Integer.parseInt(record.value());
                short delivery = record.deliveryCount().orElse((short) -1);
                // A renewed record comes back from the client itself (a replay), with the
                // delivery count it had: the broker did not deliver it again.
                boolean replay = !seen.add(record.partition() + ":" + record.offset() + ":" + delivery);
                AcknowledgeType action = value % 10 == 7 && !replay ? AcknowledgeType.RENEW : plan(value, delivery);
                consumer.acknowledge(record, action);
                renewing |= action == AcknowledgeType.RENEW;
                if (action == AcknowledgeType.ACCEPT || action == AcknowledgeType.REJECT) {
                    done.add(value);
                }
                Map<String, Object> one = new LinkedHashMap<>();
                one.put("topic", record.topic());
                one.put("partition", record.partition());
                one.put("offset", record.offset());
                one.put("value", value);
                one.put("delivery_count", (int) delivery);
                one.put("replay", replay);
                one.put("action", action.toString().toLowerCase(java.util.Locale.ROOT));
                deliveries.add(one);
            }
            polls++;
            if (renewing || polls % 2 == 1) {
                consumer.commitSync(Duration.ofSeconds(30)); // a ShareAcknowledge
            }
        }
        consumer.commitSync(Duration.ofSeconds(30));
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("deliveries", deliveries);
        out.put("complete", done.size() == count);
        return out;
    }

    private Object describe(String bootstrap, String group) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(bootstrap)) {
            ShareGroupDescription description = admin.describeShareGroups(List.of(group)).describedGroups().get(group).get();
            out.put("state", description.groupState().toString());
            List<Map<String, Object>> members = new ArrayList<>();
            for (ShareMemberDescription member : description.members()) {
                Map<String, Object> one = new LinkedHashMap<>();
                one.put("member_id", member.consumerId());
                one.put("client_id", member.clientId());
                List<List<Object>> assigned = new ArrayList<>();
                for (TopicPartition tp : member.assignment().topicPartitions()) {
                    assigned.add(List.of(tp.topic(), tp.partition()));
                }
                one.put("assignment", assigned);
                members.add(one);
            }
            out.put("members", members);
            Map<TopicPartition, SharePartitionOffsetInfo> offsets = admin
                .listShareGroupOffsets(Map.of(group, new ListShareGroupOffsetsSpec()))
                .partitionsToOffsetInfo(group)
                .get();
            Map<String, Object> starts = new TreeMap<>();
            for (Map.Entry<TopicPartition, SharePartitionOffsetInfo> entry : offsets.entrySet()) {
                Map<String, Object> one = new HashMap<>();
                one.put("start_offset", entry.getValue().startOffset());
                one.put("lag", entry.getValue().lag().orElse(null));
                starts.put(entry.getKey().topic() + ":" + entry.getKey().partition(), one);
            }
            out.put("offsets", starts);
        }
        return out;
    }

    private void close() {
        if (consumer != null) {
            consumer.close(Duration.ofSeconds(10));
            consumer = null;
        }
    }
}
