package clients;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListConfigResourcesResult;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Drives Kafka's own Java client (producer, consumer, share consumer, Admin) for the tests:
 * one JSON command per line on stdin, one JSON answer per line on stdout, so one JVM serves
 * every step of a test module (tests/support/kafka_java.py is the other end).
 *
 * <p>A command is {"op": ..., "bootstrap": ..., "client_id": ..., ...}; the answer is
 * {"ok": true, "result": {...}} or {"ok": false, "error": {"class": ..., "message": ...}}
 * with the exception as the client raised it (the cause of an ExecutionException). Steps
 * that go on after an error (each Admin action, each record sent) report it in place.
 *
 * <p>Every answer that closed a client carries that client's own counts of the requests it
 * sent and the connections it opened ("client_counts", read from its metrics after close,
 * so requests sent while closing count too): the tests compare them with what the proxy
 * logged for that client id.
 *
 * <p>Keys, values and header values are UTF-8 strings (JSON null for a null one).
 */
public final class Driver {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final long DEFAULT_TIMEOUT_MS = 30_000;

    private Driver() {}

    public static void main(String[] args) throws Exception {
        // The protocol has stdout to itself: anything else that prints (a logger's default
        // console appender) goes to stderr.
        PrintStream protocol = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        BufferedReader in =
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            ObjectNode answer = JSON.createObjectNode();
            try {
                JsonNode command = JSON.readTree(line);
                answer.put("ok", true);
                answer.set("result", dispatch(command));
            } catch (Throwable t) {
                answer.removeAll();
                answer.put("ok", false);
                answer.set("error", describe(t));
            }
            protocol.println(JSON.writeValueAsString(answer));
        }
    }

    private static JsonNode dispatch(JsonNode command) throws Exception {
        String op = command.path("op").asText();
        switch (op) {
            case "ping":
                return JSON.createObjectNode().put("client_version", clientVersion());
            case "admin":
                return admin(command);
            case "produce":
                return produce(command);
            case "consume":
                return consume(command);
            case "share_consume":
                return shareConsume(command);
            default:
                throw new IllegalArgumentException("unknown op " + op);
        }
    }

    // --- errors ---------------------------------------------------------------------------

    /** The exception the caller meets: the cause of a future's wrapper, class and message. */
    static ObjectNode describe(Throwable t) {
        Throwable cause = t;
        while ((cause instanceof ExecutionException || cause instanceof CompletionException)
                && cause.getCause() != null) {
            cause = cause.getCause();
        }
        ObjectNode error = JSON.createObjectNode();
        error.put("class", cause.getClass().getName());
        error.put("message", String.valueOf(cause.getMessage()));
        return error;
    }

    // --- configuration ----------------------------------------------------------------------

    private static Properties properties(JsonNode command) {
        Properties props = new Properties();
        props.put("bootstrap.servers", command.path("bootstrap").asText());
        props.put("client.id", command.path("client_id").asText());
        JsonNode config = command.path("config");
        for (Iterator<Map.Entry<String, JsonNode>> it = config.fields(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> entry = it.next();
            props.put(entry.getKey(), entry.getValue().asText());
        }
        return props;
    }

    private static Duration timeout(JsonNode command) {
        return Duration.ofMillis(command.path("timeout_ms").asLong(DEFAULT_TIMEOUT_MS));
    }

    /** kafka-clients' version as its jar states it (kafka/kafka-version.properties). */
    private static String clientVersion() throws java.io.IOException {
        Properties version = new Properties();
        try (var in = KafkaProducer.class.getResourceAsStream("/kafka/kafka-version.properties")) {
            version.load(in);
        }
        return version.getProperty("version");
    }

    // --- the client's own counts ------------------------------------------------------------

    /**
     * The client's aggregate "request-total" and "connection-creation-total" (not the
     * per-node ones). Holding the metric objects lets them be read after close, when the
     * client has unregistered them: requests sent while closing (LeaveGroup, a last commit)
     * are then counted too.
     */
    static final class Counts {
        private final List<Metric> requests = new ArrayList<>();
        private final List<Metric> connections = new ArrayList<>();

        Counts(Map<MetricName, ? extends Metric> metrics) {
            for (Map.Entry<MetricName, ? extends Metric> entry : metrics.entrySet()) {
                MetricName name = entry.getKey();
                if (name.group().endsWith("-node-metrics")) {
                    continue;
                }
                if (name.name().equals("request-total")) {
                    requests.add(entry.getValue());
                } else if (name.name().equals("connection-creation-total")) {
                    connections.add(entry.getValue());
                }
            }
        }

        ObjectNode toJson() {
            ObjectNode counts = JSON.createObjectNode();
            counts.put("requests", sum(requests));
            counts.put("connections", sum(connections));
            return counts;
        }

        private static long sum(List<Metric> metrics) {
            double total = 0;
            for (Metric metric : metrics) {
                total += ((Number) metric.metricValue()).doubleValue();
            }
            return Math.round(total);
        }
    }

    // --- records ----------------------------------------------------------------------------

    private static String text(JsonNode node) {
        return node == null || node.isNull() || node.isMissingNode() ? null : node.asText();
    }

    private static List<Header> headers(JsonNode record) {
        List<Header> headers = new ArrayList<>();
        for (JsonNode header : record.path("headers")) {
            String value = text(header.get(1));
            headers.add(
                    new RecordHeader(
                            header.get(0).asText(),
                            value == null ? null : value.getBytes(StandardCharsets.UTF_8)));
        }
        return headers;
    }

    private static ProducerRecord<String, String> producerRecord(JsonNode record) {
        JsonNode partition = record.get("partition");
        JsonNode timestamp = record.get("timestamp");
        return new ProducerRecord<>(
                record.path("topic").asText(),
                partition == null || partition.isNull() ? null : partition.asInt(),
                timestamp == null || timestamp.isNull() ? null : timestamp.asLong(),
                text(record.get("key")),
                text(record.get("value")),
                headers(record));
    }

    private static ObjectNode consumed(ConsumerRecord<String, String> record) {
        ObjectNode out = JSON.createObjectNode();
        out.put("topic", record.topic());
        out.put("partition", record.partition());
        out.put("offset", record.offset());
        out.put("timestamp", record.timestamp());
        out.put("timestamp_type", record.timestampType().name);
        out.put("key", record.key());
        out.put("value", record.value());
        ArrayNode headers = out.putArray("headers");
        for (Header header : record.headers()) {
            ArrayNode pair = headers.addArray();
            pair.add(header.key());
            if (header.value() == null) {
                pair.addNull();
            } else {
                pair.add(new String(header.value(), StandardCharsets.UTF_8));
            }
        }
        record.deliveryCount().ifPresent(count -> out.put("delivery_count", count));
        return out;
    }

    private static ObjectNode metadata(RecordMetadata metadata) {
        ObjectNode out = JSON.createObjectNode();
        out.put("topic", metadata.topic());
        out.put("partition", metadata.partition());
        out.put("offset", metadata.offset());
        out.put("timestamp", metadata.timestamp());
        return out;
    }

    // --- produce ----------------------------------------------------------------------------

    /**
     * Sends "records" (each with its topic, optional partition and timestamp, key, value,
     * headers) and waits for every acknowledgement; with "transactions" instead, each
     * {"records": [...], "end": "commit"|"abort"} is one transaction of a transactional
     * producer ("config" must then name a transactional.id). Each record's answer is its
     * metadata or its error.
     */
    private static JsonNode produce(JsonNode command) throws Exception {
        Properties props = properties(command);
        props.put("key.serializer", StringSerializer.class.getName());
        props.put("value.serializer", StringSerializer.class.getName());
        ObjectNode result = JSON.createObjectNode();
        Counts counts;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            counts = new Counts(producer.metrics());
            if (command.has("transactions")) {
                producer.initTransactions();
                ArrayNode transactions = result.putArray("transactions");
                for (JsonNode transaction : command.get("transactions")) {
                    producer.beginTransaction();
                    List<Future<RecordMetadata>> sent = new ArrayList<>();
                    for (JsonNode record : transaction.path("records")) {
                        sent.add(producer.send(producerRecord(record)));
                    }
                    producer.flush();
                    ObjectNode outcome = transactions.addObject();
                    outcome.set("sent", await(sent));
                    String end = transaction.path("end").asText("commit");
                    if (end.equals("abort")) {
                        producer.abortTransaction();
                    } else {
                        producer.commitTransaction();
                    }
                    outcome.put("end", end);
                }
            } else {
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                for (JsonNode record : command.path("records")) {
                    sent.add(producer.send(producerRecord(record)));
                }
                producer.flush();
                result.set("sent", await(sent));
            }
        }
        result.set("client_counts", counts.toJson());
        return result;
    }

    private static ArrayNode await(List<Future<RecordMetadata>> sent) {
        ArrayNode out = JSON.createArrayNode();
        for (Future<RecordMetadata> future : sent) {
            try {
                out.add(metadata(future.get()));
            } catch (Exception e) {
                out.addObject().set("error", describe(e));
            }
        }
        return out;
    }

    // --- consume ----------------------------------------------------------------------------

    /**
     * A consumer in group "config"/group.id (group.protocol classic or consumer) subscribed
     * to "topics": polls until "expect" records came (or timeout_ms passed), then once more
     * for "linger_ms" to see any record beyond them, commits synchronously and reports the
     * records, its assignment, the committed offsets and its positions.
     */
    private static JsonNode consume(JsonNode command) throws Exception {
        Properties props = properties(command);
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        props.putIfAbsent("auto.offset.reset", "earliest");
        props.putIfAbsent("enable.auto.commit", "false");
        List<String> topics = new ArrayList<>();
        command.path("topics").forEach(t -> topics.add(t.asText()));
        int expect = command.path("expect").asInt();
        long linger = command.path("linger_ms").asLong(500);
        ObjectNode result = JSON.createObjectNode();
        Counts counts;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            counts = new Counts(consumer.metrics());
            consumer.subscribe(topics);
            ArrayNode records = result.putArray("records");
            long deadline = System.currentTimeMillis() + timeout(command).toMillis();
            while (records.size() < expect && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                    records.add(consumed(record));
                }
            }
            if (linger > 0) {
                long until = System.currentTimeMillis() + linger;
                while (System.currentTimeMillis() < until) {
                    for (ConsumerRecord<String, String> record :
                            consumer.poll(Duration.ofMillis(100))) {
                        records.add(consumed(record));
                    }
                }
            }
            consumer.commitSync(timeout(command));
            Set<TopicPartition> assignment = consumer.assignment();
            result.set("assignment", partitions(assignment));
            ObjectNode committed = result.putObject("committed");
            ObjectNode positions = result.putObject("positions");
            Map<TopicPartition, OffsetAndMetadata> offsets =
                    consumer.committed(assignment, timeout(command));
            for (TopicPartition partition : sorted(assignment)) {
                OffsetAndMetadata offset = offsets.get(partition);
                committed.put(partition.toString(), offset == null ? -1 : offset.offset());
            }
            for (TopicPartition partition : sorted(assignment)) {
                positions.put(partition.toString(), consumer.position(partition));
            }
            result.put("member_id_assigned", !consumer.groupMetadata().memberId().isEmpty());
            result.put("generation_id", consumer.groupMetadata().generationId());
        }
        result.set("client_counts", counts.toJson());
        return result;
    }

    private static List<TopicPartition> sorted(Collection<TopicPartition> partitions) {
        List<TopicPartition> list = new ArrayList<>(partitions);
        list.sort(Comparator.comparing(TopicPartition::topic).thenComparing(TopicPartition::partition));
        return list;
    }

    private static ArrayNode partitions(Collection<TopicPartition> partitions) {
        ArrayNode out = JSON.createArrayNode();
        for (TopicPartition partition : sorted(partitions)) {
            out.addArray().add(partition.topic()).add(partition.partition());
        }
        return out;
    }

    // --- share consume (KIP-932) --------------------------------------------------------------

    /**
     * A share consumer of group "group" on "topic" with explicit acknowledgement, until it
     * has accepted "expect" distinct records: on its first delivery a record at an odd offset
     * is released (the broker hands it out again, delivery count 2), every other delivery is
     * accepted; each poll's acknowledgements are committed synchronously (the answer lists
     * each partition's outcome). The answer lists every delivery in order of partition,
     * offset and delivery count.
     */
    private static JsonNode shareConsume(JsonNode command) throws Exception {
        Properties props = properties(command);
        props.put("group.id", command.path("group").asText());
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        props.put("share.acknowledgement.mode", "explicit");
        int expect = command.path("expect").asInt();
        ObjectNode result = JSON.createObjectNode();
        List<ObjectNode> deliveries = new ArrayList<>();
        Set<String> accepted = new HashSet<>();
        ArrayNode commits = result.putArray("commits");
        Counts counts;
        long started = System.currentTimeMillis();
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(props)) {
            counts = new Counts(consumer.metrics());
            consumer.subscribe(List.of(command.path("topic").asText()));
            long deadline = started + timeout(command).toMillis();
            while (accepted.size() < expect && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> record : batch) {
                    if (deliveries.isEmpty()) {
                        result.put("first_record_ms", System.currentTimeMillis() - started);
                    }
                    deliveries.add(consumed(record));
                    boolean release =
                            record.deliveryCount().orElse((short) 1) == 1 && record.offset() % 2 == 1;
                    consumer.acknowledge(
                            record, release ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT);
                    if (!release) {
                        accepted.add(record.partition() + "@" + record.offset());
                    }
                }
                if (!batch.isEmpty()) {
                    commits.add(commitOutcome(consumer.commitSync()));
                }
            }
            result.put("done_ms", System.currentTimeMillis() - started);
        }
        deliveries.sort(
                Comparator.<ObjectNode>comparingInt(d -> d.path("partition").asInt())
                        .thenComparingLong(d -> d.path("offset").asLong())
                        .thenComparingInt(d -> d.path("delivery_count").asInt()));
        result.putArray("deliveries").addAll(deliveries);
        result.set("client_counts", counts.toJson());
        return result;
    }

    private static ObjectNode commitOutcome(
            Map<TopicIdPartition, java.util.Optional<org.apache.kafka.common.KafkaException>> done) {
        ObjectNode out = JSON.createObjectNode();
        for (Map.Entry<TopicIdPartition, java.util.Optional<org.apache.kafka.common.KafkaException>>
                entry : done.entrySet()) {
            String key = String.valueOf(entry.getKey().partition());
            out.put(key, entry.getValue().map(e -> e.getClass().getName()).orElse("ok"));
        }
        return out;
    }

    // --- admin ------------------------------------------------------------------------------

    /**
     * One Admin client runs "actions" in order; each answer is {"do": ..., "value": ...} or
     * {"do": ..., "error": ...}, so an expected error (creating a topic twice) is a result
     * to compare, and the actions after it still run.
     */
    private static JsonNode admin(JsonNode command) throws Exception {
        ObjectNode result = JSON.createObjectNode();
        ArrayNode answers = result.putArray("answers");
        Counts counts;
        try (Admin admin = Admin.create(properties(command))) {
            counts = new Counts(admin.metrics());
            for (JsonNode action : command.path("actions")) {
                ObjectNode answer = answers.addObject();
                String name = action.path("do").asText();
                answer.put("do", name);
                long deadline = System.currentTimeMillis() + timeout(command).toMillis();
                while (true) {
                    answer.remove(List.of("value", "error"));
                    try {
                        answer.set("value", adminAction(admin, name, action));
                    } catch (Exception e) {
                        answer.set("error", describe(e));
                    }
                    if (settled(action, answer)) {
                        break;
                    }
                    if (System.currentTimeMillis() > deadline) {
                        answer.put("unsettled", true);
                        break;
                    }
                    Thread.sleep(100);
                }
            }
        }
        result.set("client_counts", counts.toJson());
        return result;
    }

    /**
     * Whether an action's answer is final. A cluster applies a change (a new topic, a
     * config) on its controller first and on each broker a moment later, so an action
     * that reads it back may say what it waits for: "until" (a value that contains this
     * JSON: objects by their keys, anything else equal) or "until_error" (the end of the
     * exception's class name); it is repeated, within the step's timeout, until so (and
     * marked "unsettled" if it never is).
     */
    static boolean settled(JsonNode action, ObjectNode answer) {
        if (action.has("until")) {
            return answer.has("value") && contains(answer.get("value"), action.get("until"));
        }
        if (action.has("until_error")) {
            return answer.has("error")
                    && answer.get("error").path("class").asText().endsWith(
                            action.get("until_error").asText());
        }
        return true;
    }

    static boolean contains(JsonNode value, JsonNode pattern) {
        if (pattern.isObject()) {
            if (!value.isObject()) {
                return false;
            }
            for (Iterator<Map.Entry<String, JsonNode>> it = pattern.fields(); it.hasNext(); ) {
                Map.Entry<String, JsonNode> entry = it.next();
                if (!value.has(entry.getKey()) || !contains(value.get(entry.getKey()), entry.getValue())) {
                    return false;
                }
            }
            return true;
        }
        if (pattern.isNumber()) {  // 0 (an int) is 0 (a long)
            return value.isNumber() && value.decimalValue().compareTo(pattern.decimalValue()) == 0;
        }
        return value.equals(pattern);
    }

    private static JsonNode adminAction(Admin admin, String name, JsonNode action)
            throws Exception {
        switch (name) {
            case "create_topics":
                return createTopics(admin, action);
            case "create_partitions":
                admin.createPartitions(
                                Map.of(
                                        action.path("topic").asText(),
                                        NewPartitions.increaseTo(action.path("total").asInt())))
                        .all()
                        .get();
                return JSON.nullNode();
            case "describe_topics":
                return describeTopics(admin, action);
            case "describe_configs":
                return describeConfigs(admin, action);
            case "alter_configs":
                return alterConfigs(admin, action);
            case "describe_cluster":
                return describeCluster(admin);
            case "list_offsets":
                return listOffsets(admin, action);
            case "delete_records":
                return deleteRecords(admin, action);
            case "list_group_offsets":
                return listGroupOffsets(admin, action);
            case "alter_group_offsets":
                return alterGroupOffsets(admin, action);
            case "describe_groups":
                return describeGroups(admin, action);
            case "describe_share_groups":
                return describeShareGroups(admin, action);
            case "list_groups":
                return listGroups(admin, action);
            case "list_config_resources":
                return listConfigResources(admin, action);
            case "delete_groups":
                admin.deleteConsumerGroups(strings(action.path("groups"))).all().get();
                return JSON.nullNode();
            case "delete_topics":
                admin.deleteTopics(strings(action.path("topics"))).all().get();
                return JSON.nullNode();
            default:
                throw new IllegalArgumentException("unknown admin action " + name);
        }
    }

    private static List<String> strings(JsonNode array) {
        List<String> out = new ArrayList<>();
        array.forEach(item -> out.add(item.asText()));
        return out;
    }

    private static JsonNode createTopics(Admin admin, JsonNode action) throws Exception {
        List<NewTopic> topics = new ArrayList<>();
        for (JsonNode topic : action.path("topics")) {
            NewTopic newTopic =
                    new NewTopic(
                            topic.path("name").asText(),
                            topic.path("partitions").asInt(1),
                            (short) topic.path("replication_factor").asInt(1));
            Map<String, String> configs = new HashMap<>();
            topic.path("configs").fields().forEachRemaining(e -> configs.put(e.getKey(), e.getValue().asText()));
            topics.add(newTopic.configs(configs));
        }
        var created = admin.createTopics(topics);
        created.all().get();
        ObjectNode out = JSON.createObjectNode();
        for (NewTopic topic : topics) {
            ObjectNode one = out.putObject(topic.name());
            one.put("partitions", created.numPartitions(topic.name()).get());
            one.put("replication_factor", created.replicationFactor(topic.name()).get());
        }
        return out;
    }

    private static JsonNode describeTopics(Admin admin, JsonNode action) throws Exception {
        Map<String, TopicDescription> described =
                admin.describeTopics(strings(action.path("topics"))).allTopicNames().get();
        ObjectNode out = JSON.createObjectNode();
        for (TopicDescription description : new TreeMap<>(described).values()) {
            ObjectNode topic = out.putObject(description.name());
            topic.put("internal", description.isInternal());
            topic.put("topic_id", description.topicId().toString());
            // For an action's "until": the shape a cluster has once a change settled.
            topic.put("partition_count", description.partitions().size());
            topic.put("leaderless", description.partitions().stream()
                    .filter(p -> p.leader() == null || p.leader().isEmpty()).count());
            topic.put("under_replicated", description.partitions().stream()
                    .filter(p -> p.isr().size() < p.replicas().size()).count());
            ArrayNode partitions = topic.putArray("partitions");
            for (TopicPartitionInfo info : description.partitions()) {
                ObjectNode partition = partitions.addObject();
                partition.put("partition", info.partition());
                partition.put("leader", info.leader() == null ? -1 : info.leader().id());
                ArrayNode replicas = partition.putArray("replicas");
                info.replicas().forEach(node -> replicas.add(node.id()));
                ArrayNode isr = partition.putArray("isr");
                info.isr().forEach(node -> isr.add(node.id()));
            }
        }
        return out;
    }

    private static ConfigResource resource(JsonNode action) {
        return new ConfigResource(
                ConfigResource.Type.valueOf(action.path("type").asText("TOPIC")),
                action.path("name").asText());
    }

    /** Every entry of the resource (or only "keys"): value, source, read-only, sensitive. */
    private static JsonNode describeConfigs(Admin admin, JsonNode action) throws Exception {
        ConfigResource resource = resource(action);
        Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
        Set<String> keys = new HashSet<>(strings(action.path("keys")));
        ObjectNode out = JSON.createObjectNode();
        List<ConfigEntry> entries = new ArrayList<>(config.entries());
        entries.sort(Comparator.comparing(ConfigEntry::name));
        for (ConfigEntry entry : entries) {
            if (!keys.isEmpty() && !keys.contains(entry.name())) {
                continue;
            }
            ObjectNode one = out.putObject(entry.name());
            one.put("value", entry.value());
            one.put("source", entry.source().name());
            one.put("read_only", entry.isReadOnly());
            one.put("sensitive", entry.isSensitive());
        }
        return out;
    }

    /** incrementalAlterConfigs: "set" {name: value} and "delete" [names] on one resource. */
    private static JsonNode alterConfigs(Admin admin, JsonNode action) throws Exception {
        ConfigResource resource = resource(action);
        List<AlterConfigOp> ops = new ArrayList<>();
        action.path("set")
                .fields()
                .forEachRemaining(
                        e ->
                                ops.add(
                                        new AlterConfigOp(
                                                new ConfigEntry(e.getKey(), e.getValue().asText()),
                                                AlterConfigOp.OpType.SET)));
        for (String key : strings(action.path("delete"))) {
            ops.add(new AlterConfigOp(new ConfigEntry(key, null), AlterConfigOp.OpType.DELETE));
        }
        admin.incrementalAlterConfigs(Map.of(resource, ops)).all().get();
        return JSON.nullNode();
    }

    private static JsonNode describeCluster(Admin admin) throws Exception {
        DescribeClusterResult described = admin.describeCluster();
        ObjectNode out = JSON.createObjectNode();
        out.put("cluster_id", described.clusterId().get());
        Node controller = described.controller().get();
        out.put("controller", controller == null ? -1 : controller.id());
        ArrayNode nodes = out.putArray("nodes");
        List<Node> sorted = new ArrayList<>(described.nodes().get());
        sorted.sort(Comparator.comparingInt(Node::id));
        for (Node node : sorted) {
            nodes.addObject().put("id", node.id()).put("host", node.host()).put("port", node.port());
        }
        return out;
    }

    private static OffsetSpec offsetSpec(String spec) {
        switch (spec) {
            case "earliest":
                return OffsetSpec.earliest();
            case "latest":
                return OffsetSpec.latest();
            case "max_timestamp":
                return OffsetSpec.maxTimestamp();
            default:
                return OffsetSpec.forTimestamp(Long.parseLong(spec));
        }
    }

    /** Each partition of "topic" (0..partitions-1) at "spec": offset and timestamp. */
    private static JsonNode listOffsets(Admin admin, JsonNode action) throws Exception {
        String topic = action.path("topic").asText();
        Map<TopicPartition, OffsetSpec> wanted = new HashMap<>();
        for (int p = 0; p < action.path("partitions").asInt(1); p++) {
            wanted.put(new TopicPartition(topic, p), offsetSpec(action.path("spec").asText()));
        }
        ListOffsetsOptions options =
                new ListOffsetsOptions(
                        IsolationLevel.valueOf(
                                action.path("isolation").asText("READ_UNCOMMITTED")));
        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> found =
                admin.listOffsets(wanted, options).all().get();
        ObjectNode out = JSON.createObjectNode();
        for (TopicPartition partition : sorted(found.keySet())) {
            ListOffsetsResult.ListOffsetsResultInfo info = found.get(partition);
            out.putObject(String.valueOf(partition.partition()))
                    .put("offset", info.offset())
                    .put("timestamp", info.timestamp());
        }
        return out;
    }

    /** deleteRecords before {"partition": offset} of "topic": each new low watermark. */
    private static JsonNode deleteRecords(Admin admin, JsonNode action) throws Exception {
        String topic = action.path("topic").asText();
        Map<TopicPartition, RecordsToDelete> wanted = new HashMap<>();
        action.path("before")
                .fields()
                .forEachRemaining(
                        e ->
                                wanted.put(
                                        new TopicPartition(topic, Integer.parseInt(e.getKey())),
                                        RecordsToDelete.beforeOffset(e.getValue().asLong())));
        ObjectNode out = JSON.createObjectNode();
        Map<TopicPartition, KafkaFuture<org.apache.kafka.clients.admin.DeletedRecords>> done =
                admin.deleteRecords(wanted).lowWatermarks();
        for (TopicPartition partition : sorted(done.keySet())) {
            out.put(String.valueOf(partition.partition()), done.get(partition).get().lowWatermark());
        }
        return out;
    }

    private static JsonNode listGroupOffsets(Admin admin, JsonNode action) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> offsets =
                admin.listConsumerGroupOffsets(action.path("group").asText())
                        .partitionsToOffsetAndMetadata()
                        .get();
        ObjectNode out = JSON.createObjectNode();
        for (TopicPartition partition : sorted(offsets.keySet())) {
            OffsetAndMetadata offset = offsets.get(partition);
            out.putObject(partition.toString())
                    .put("offset", offset.offset())
                    .put("metadata", offset.metadata());
        }
        return out;
    }

    private static JsonNode alterGroupOffsets(Admin admin, JsonNode action) throws Exception {
        String topic = action.path("topic").asText();
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        action.path("offsets")
                .fields()
                .forEachRemaining(
                        e ->
                                offsets.put(
                                        new TopicPartition(topic, Integer.parseInt(e.getKey())),
                                        new OffsetAndMetadata(e.getValue().asLong(), "altered")));
        admin.alterConsumerGroupOffsets(action.path("group").asText(), offsets).all().get();
        return JSON.nullNode();
    }

    private static JsonNode describeGroups(Admin admin, JsonNode action) throws Exception {
        Map<String, ConsumerGroupDescription> described =
                admin.describeConsumerGroups(strings(action.path("groups"))).all().get();
        ObjectNode out = JSON.createObjectNode();
        for (ConsumerGroupDescription group : new TreeMap<>(described).values()) {
            ObjectNode one = out.putObject(group.groupId());
            one.put("state", group.groupState().toString());
            one.put("type", group.type().toString());
            one.put("assignor", group.partitionAssignor());
            one.put("simple", group.isSimpleConsumerGroup());
            ArrayNode members = one.putArray("members");
            for (MemberDescription member : group.members()) {
                ObjectNode m = members.addObject();
                m.put("client_id", member.clientId());
                m.set("assignment", partitions(member.assignment().topicPartitions()));
            }
        }
        return out;
    }

    private static JsonNode describeShareGroups(Admin admin, JsonNode action) throws Exception {
        Map<String, ShareGroupDescription> described =
                admin.describeShareGroups(strings(action.path("groups"))).all().get();
        ObjectNode out = JSON.createObjectNode();
        for (ShareGroupDescription group : new TreeMap<>(described).values()) {
            ObjectNode one = out.putObject(group.groupId());
            one.put("state", group.groupState().toString());
            one.put("members", group.members().size());
            ArrayNode clients = one.putArray("client_ids");
            for (ShareMemberDescription member : group.members()) {
                clients.add(member.clientId());
            }
        }
        return out;
    }

    /** The groups among "groups" that listGroups names: id, type, protocol, state. */
    private static JsonNode listGroups(Admin admin, JsonNode action) throws Exception {
        Set<String> wanted = new HashSet<>(strings(action.path("groups")));
        Collection<GroupListing> listed = admin.listGroups().all().get();
        ObjectNode out = JSON.createObjectNode();
        List<GroupListing> sorted = new ArrayList<>(listed);
        sorted.sort(Comparator.comparing(GroupListing::groupId));
        for (GroupListing group : sorted) {
            if (!wanted.contains(group.groupId())) {
                continue;
            }
            out.putObject(group.groupId())
                    .put("type", group.type().map(Object::toString).orElse(null))
                    .put("protocol", group.protocol())
                    .put("state", group.groupState().map(Object::toString).orElse(null));
        }
        return out;
    }

    /** The names of "types" resources (CLIENT_METRICS, GROUP, ...) among "names". */
    private static JsonNode listConfigResources(Admin admin, JsonNode action) throws Exception {
        Set<ConfigResource.Type> types = new HashSet<>();
        action.path("types").forEach(t -> types.add(ConfigResource.Type.valueOf(t.asText())));
        Set<String> wanted = new HashSet<>(strings(action.path("names")));
        ListConfigResourcesResult listed =
                admin.listConfigResources(types, new org.apache.kafka.clients.admin.ListConfigResourcesOptions());
        List<String> names = new ArrayList<>();
        for (ConfigResource resource : listed.all().get()) {
            if (wanted.contains(resource.name())) {
                names.add(resource.type() + ":" + resource.name());
            }
        }
        names.sort(String::compareTo);
        ArrayNode out = JSON.createArrayNode();
        names.forEach(out::add);
        return out;
    }
}
