package truth;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Kafka's own Java client, driven one command at a time, for the tests that hold what kafkalens
 * says against what the client and the broker themselves say (tests/interop/test_kafka_truth_*.py).
 *
 * <p>Reads one JSON command per line on stdin and answers each with one JSON line on stdout:
 * {@code {"ok": true, ...}} or {@code {"ok": false, "error": "..."}}. Clients are kept by the
 * name a command gives them ({@code "name"}); all are used from this one thread (a consumer is
 * not thread-safe). Anything else the client libraries print goes to stderr.
 *
 * <p>Commands ({@code "op"}): {@code version}; {@code producer}, {@code consumer}, {@code admin}
 * (create a client from {@code props}; a consumer subscribes to {@code topics}); {@code produce}
 * ({@code count} records of {@code size} bytes to {@code topic}/{@code partition}, each sent
 * alone and waited for, so each is a batch of its own); {@code poll_until} (poll until every
 * partition in {@code positions} reached that position, or {@code timeout_ms}); {@code pause},
 * {@code resume}; {@code state} (assignment, positions, the consumer's own lag);
 * {@code commit}; {@code create_topic}; {@code end_offsets}; {@code group_offsets};
 * {@code describe_group}; {@code subscribe_metrics} (a CLIENT_METRICS resource set through the
 * Admin API); {@code instance_id} (the client's own {@code clientInstanceId}); {@code metrics}
 * (the client's own metrics map); {@code close}.
 */
public final class Driver {
    private static final ObjectMapper JSON = new ObjectMapper();

    private final Map<String, KafkaProducer<byte[], byte[]>> producers = new HashMap<>();
    private final Map<String, KafkaConsumer<byte[], byte[]>> consumers = new HashMap<>();
    private final Map<String, Admin> admins = new HashMap<>();

    public static void main(String[] args) throws Exception {
        // Answers own stdout: whatever else prints to System.out (a logging default) goes to
        // stderr. Set before any client class is loaded.
        PrintStream answers = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        Driver driver = new Driver();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            ObjectNode answer;
            try {
                answer = driver.run(JSON.readTree(line));
                answer.put("ok", true);
            } catch (Exception e) {
                answer = JSON.createObjectNode();
                answer.put("ok", false);
                answer.put("error", e.toString());
                StringWriter trace = new StringWriter();
                e.printStackTrace(new PrintWriter(trace));
                answer.put("trace", trace.toString());
            }
            answers.println(JSON.writeValueAsString(answer));
        }
        driver.closeAll();
    }

    private ObjectNode run(JsonNode command) throws Exception {
        String op = command.path("op").asText();
        String name = command.path("name").asText("");
        ObjectNode out = JSON.createObjectNode();
        switch (op) {
            case "version" -> {
                out.put("version", clientVersion());
                out.put("software_name", "apache-kafka-java");
            }
            case "producer" -> producers.put(name, new KafkaProducer<>(props(command),
                    new ByteArraySerializer(), new ByteArraySerializer()));
            case "consumer" -> {
                KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props(command),
                        new ByteArrayDeserializer(), new ByteArrayDeserializer());
                consumer.subscribe(strings(command.path("topics")));
                consumers.put(name, consumer);
            }
            case "admin" -> admins.put(name, Admin.create(props(command)));
            case "produce" -> produce(producer(name), command, out);
            case "poll_until" -> pollUntil(consumer(name), command, out);
            case "pause" -> {
                KafkaConsumer<byte[], byte[]> consumer = consumer(name);
                consumer.pause(consumer.assignment());
                state(consumer, out);
            }
            case "resume" -> {
                KafkaConsumer<byte[], byte[]> consumer = consumer(name);
                consumer.resume(consumer.assignment());
            }
            case "state" -> state(consumer(name), out);
            case "commit" -> {
                KafkaConsumer<byte[], byte[]> consumer = consumer(name);
                consumer.commitSync(Duration.ofSeconds(60));
                ObjectNode committed = out.putObject("committed");
                for (Map.Entry<TopicPartition, OffsetAndMetadata> entry
                        : consumer.committed(consumer.assignment(), Duration.ofSeconds(60)).entrySet()) {
                    if (entry.getValue() != null) {
                        committed.put(key(entry.getKey()), entry.getValue().offset());
                    }
                }
            }
            case "create_topic" -> admin(name).createTopics(List.of(new NewTopic(
                    command.path("topic").asText(), command.path("partitions").asInt(1), (short) 1)))
                    .all().get();
            case "end_offsets" -> {
                Map<TopicPartition, OffsetSpec> ask = new HashMap<>();
                String topic = command.path("topic").asText();
                for (JsonNode partition : command.path("partitions")) {
                    ask.put(new TopicPartition(topic, partition.asInt()), OffsetSpec.latest());
                }
                ObjectNode offsets = out.putObject("offsets");
                admin(name).listOffsets(ask).all().get().forEach(
                        (tp, info) -> offsets.put(key(tp), info.offset()));
            }
            case "group_offsets" -> {
                ObjectNode offsets = out.putObject("offsets");
                admin(name).listConsumerGroupOffsets(command.path("group").asText())
                        .partitionsToOffsetAndMetadata().get().forEach((tp, meta) -> {
                            if (meta != null) {
                                offsets.put(key(tp), meta.offset());
                            }
                        });
            }
            case "describe_group" -> {
                String group = command.path("group").asText();
                ConsumerGroupDescription description = admin(name)
                        .describeConsumerGroups(List.of(group)).all().get().get(group);
                out.put("type", description.type().toString());
                out.put("state", String.valueOf(description.groupState()));
                out.put("members", description.members().size());
            }
            case "subscribe_metrics" -> {
                ConfigResource resource = new ConfigResource(ConfigResource.Type.CLIENT_METRICS,
                        command.path("subscription").asText());
                List<AlterConfigOp> ops = new ArrayList<>();
                Iterator<Map.Entry<String, JsonNode>> configs = command.path("configs").properties().iterator();
                while (configs.hasNext()) {
                    Map.Entry<String, JsonNode> entry = configs.next();
                    ops.add(new AlterConfigOp(new ConfigEntry(entry.getKey(), entry.getValue().asText()),
                            AlterConfigOp.OpType.SET));
                }
                admin(name).incrementalAlterConfigs(Map.of(resource, ops)).all().get();
            }
            case "instance_id" -> {
                Duration timeout = Duration.ofMillis(command.path("timeout_ms").asLong(30000));
                Object id;
                if (producers.containsKey(name)) {
                    id = producers.get(name).clientInstanceId(timeout);
                } else if (consumers.containsKey(name)) {
                    id = consumers.get(name).clientInstanceId(timeout);
                } else {
                    id = admin(name).clientInstanceId(timeout);
                }
                out.put("client_instance_id", id == null ? null : id.toString());
            }
            case "metrics" -> metrics(name, out);
            case "close" -> close(name);
            default -> throw new IllegalArgumentException("unknown op " + op);
        }
        return out;
    }

    /** The version the client sends in ApiVersions (KIP-511), from its own AppInfoParser (the
     * class moved packages in 4.4, hence the look-up by name). */
    private static String clientVersion() throws Exception {
        for (String name : List.of("org.apache.kafka.common.utils.internals.AppInfoParser",
                "org.apache.kafka.common.utils.AppInfoParser")) {
            try {
                return (String) Class.forName(name).getMethod("getVersion").invoke(null);
            } catch (ClassNotFoundException e) {
                // the other package
            }
        }
        throw new IllegalStateException("no AppInfoParser in the client");
    }

    private void produce(KafkaProducer<byte[], byte[]> producer, JsonNode command, ObjectNode out)
            throws ExecutionException, InterruptedException {
        String topic = command.path("topic").asText();
        int partition = command.path("partition").asInt();
        byte[] value = new byte[command.path("size").asInt(100)];
        long last = -1;
        for (int i = 0; i < command.path("count").asInt(); i++) {
            Future<RecordMetadata> sent = producer.send(new ProducerRecord<>(topic, partition, null, value));
            last = sent.get().offset();
        }
        out.put("last_offset", last);
    }

    private void pollUntil(KafkaConsumer<byte[], byte[]> consumer, JsonNode command, ObjectNode out) {
        Map<TopicPartition, Long> want = new HashMap<>();
        String topic = command.path("topic").asText();
        command.path("positions").properties().forEach(
                e -> want.put(new TopicPartition(topic, Integer.parseInt(e.getKey())), e.getValue().asLong()));
        long deadline = System.currentTimeMillis() + command.path("timeout_ms").asLong(60000);
        Map<String, Long> handedOut = new TreeMap<>();
        boolean reached = false;
        while (!reached && System.currentTimeMillis() < deadline) {
            ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
            for (ConsumerRecord<byte[], byte[]> record : records) {
                handedOut.merge(record.topic() + "/" + record.partition(), 1L, Long::sum);
            }
            reached = consumer.assignment().containsAll(want.keySet());
            for (Map.Entry<TopicPartition, Long> entry : want.entrySet()) {
                reached = reached && consumer.position(entry.getKey()) >= entry.getValue();
            }
        }
        out.put("reached", reached);
        out.set("handed_out", JSON.valueToTree(handedOut));
        state(consumer, out);
    }

    private static void state(KafkaConsumer<byte[], byte[]> consumer, ObjectNode out) {
        ObjectNode positions = out.putObject("positions");
        ObjectNode lags = out.putObject("lags");
        ArrayNode assignment = out.putArray("assignment");
        for (TopicPartition tp : consumer.assignment()) {
            assignment.add(key(tp));
            positions.put(key(tp), consumer.position(tp));
            OptionalLong lag = consumer.currentLag(tp);
            if (lag.isPresent()) {
                lags.put(key(tp), lag.getAsLong());
            }
        }
    }

    private void metrics(String name, ObjectNode out) {
        Map<MetricName, ? extends Metric> metrics;
        if (producers.containsKey(name)) {
            metrics = producers.get(name).metrics();
        } else if (consumers.containsKey(name)) {
            metrics = consumers.get(name).metrics();
        } else {
            metrics = admin(name).metrics();
        }
        ArrayNode list = out.putArray("metrics");
        for (Map.Entry<MetricName, ? extends Metric> entry : metrics.entrySet()) {
            Object value = entry.getValue().metricValue();
            if (!(value instanceof Number number)) {
                continue;
            }
            MetricName metric = entry.getKey();
            ObjectNode item = list.addObject();
            item.put("group", metric.group());
            item.put("name", metric.name());
            item.set("tags", JSON.valueToTree(new TreeMap<>(metric.tags())));
            double v = number.doubleValue();
            if (Double.isFinite(v)) {
                item.put("value", v);
            } else {
                item.put("value", Double.toString(v));
            }
        }
    }

    private void close(String name) {
        Duration timeout = Duration.ofSeconds(30);
        if (producers.containsKey(name)) {
            producers.remove(name).close(timeout);
        } else if (consumers.containsKey(name)) {
            consumers.remove(name).close(CloseOptions.timeout(timeout));
        } else if (admins.containsKey(name)) {
            admins.remove(name).close(timeout);
        }
    }

    private void closeAll() {
        for (String name : new ArrayList<>(producers.keySet())) {
            close(name);
        }
        for (String name : new ArrayList<>(consumers.keySet())) {
            close(name);
        }
        for (String name : new ArrayList<>(admins.keySet())) {
            close(name);
        }
    }

    private KafkaProducer<byte[], byte[]> producer(String name) {
        return found(producers.get(name), name);
    }

    private KafkaConsumer<byte[], byte[]> consumer(String name) {
        return found(consumers.get(name), name);
    }

    private Admin admin(String name) {
        return found(admins.get(name), name);
    }

    private static <T> T found(T client, String name) {
        if (client == null) {
            throw new IllegalArgumentException("no client named " + name);
        }
        return client;
    }

    private static Properties props(JsonNode command) {
        Properties props = new Properties();
        command.path("props").properties().forEach(e -> props.put(e.getKey(), e.getValue().asText()));
        return props;
    }

    private static Collection<String> strings(JsonNode array) {
        List<String> out = new ArrayList<>();
        array.forEach(item -> out.add(item.asText()));
        return out;
    }

    private static String key(TopicPartition tp) {
        return tp.topic() + "/" + tp.partition();
    }
}
