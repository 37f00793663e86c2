package faults;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A Java producer or consumer kept running while brokers fail (tests/interop/test_kafka_faults.py).
 * One JSON object a line on stdout; a line "stop" on stdin ends it.
 *
 * <pre>
 * produce BOOTSTRAP TOPIC TAG RATE [key=value ...]
 *     acks=all; records keyed TAG-n, values of 100-1000 random bytes; for each acknowledged
 *     record {"ack":"TAG-n","p":partition,"o":offset,"sha":...}, for each failed one
 *     {"error":...}; at "stop": flush, then {"requests":{"node-1":N,...}} (the client's own
 *     request-total per node: requests it sent), close, {"closed":true}
 * consume BOOTSTRAP TOPIC GROUP [key=value ...]
 *     subscribes; for each record {"rec":key,"p":...,"o":...,"sha":...}, commits after each
 *     poll; at "stop": {"requests":{...}} as above, close, {"closed":true}
 * </pre>
 *
 * "sha" is the first 16 hex digits of the value's SHA-256, computed where the value was
 * made (producer) and where it arrived (consumer). key=value pairs are client settings.
 */
public final class Load {
    private static final AtomicBoolean STOP = new AtomicBoolean();

    public static void main(String[] args) throws Exception {
        Thread stdin = new Thread(Load::waitForStop, "stdin");
        stdin.setDaemon(true);
        stdin.start();
        switch (args[0]) {
            case "produce" -> produce(args[1], args[2], args[3], Integer.parseInt(args[4]), settings(args, 5));
            case "consume" -> consume(args[1], args[2], args[3], settings(args, 4));
            default -> throw new IllegalArgumentException(args[0]);
        }
    }

    private static void waitForStop() {
        try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null && !line.trim().equals("stop")) {
                // nothing else is a command
            }
        } catch (Exception e) {
            // stdin closed: stop too
        }
        STOP.set(true);
    }

    private static Properties settings(String[] args, int from) {
        Properties props = new Properties();
        for (int i = from; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        return props;
    }

    private static void produce(String bootstrap, String topic, String tag, int rate, Properties extra)
            throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("acks", "all");
        props.put("key.serializer", StringSerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        props.putAll(extra);
        Random random = new Random(tag.hashCode());
        long pause = Math.max(1, 1000L / rate);
        try (KafkaProducer<String, byte[]> producer = new KafkaProducer<>(props)) {
            long n = 0;
            while (!STOP.get()) {
                String key = tag + "-" + n++;
                byte[] value = new byte[100 + random.nextInt(901)];
                random.nextBytes(value);
                String sha = sha(value);
                producer.send(new ProducerRecord<>(topic, key, value), (meta, error) -> {
                    if (error != null) {
                        emit("{\"error\":" + quote(key + ": " + error) + "}");
                    } else {
                        emit("{\"ack\":" + quote(key) + ",\"p\":" + meta.partition() + ",\"o\":"
                                + meta.offset() + ",\"sha\":\"" + sha + "\"}");
                    }
                });
                Thread.sleep(pause);
            }
            producer.flush();
            emit("{\"requests\":" + requestsByNode(producer.metrics()) + "}");
        }
        emit("{\"closed\":true}");
    }

    private static void consume(String bootstrap, String topic, String group, Properties extra) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("auto.offset.reset", "earliest");
        props.put("enable.auto.commit", "false");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        props.putAll(extra);
        try (KafkaConsumer<String, byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (!STOP.get()) {
                var records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, byte[]> r : records) {
                    emit("{\"rec\":" + quote(r.key()) + ",\"p\":" + r.partition() + ",\"o\":" + r.offset()
                            + ",\"sha\":\"" + sha(r.value()) + "\"}");
                }
                if (!records.isEmpty()) {
                    try {
                        consumer.commitSync(Duration.ofSeconds(30));
                    } catch (Exception e) {
                        emit("{\"commit_error\":" + quote(e.toString()) + "}");
                    }
                }
            }
            emit("{\"requests\":" + requestsByNode(consumer.metrics()) + "}");
        }
        emit("{\"closed\":true}");
    }

    /**
     * The client's own count of the requests it sent, by the node it sent them to
     * (request-total of each node: "node--1" is the first bootstrap address), as a JSON object.
     */
    private static String requestsByNode(Map<MetricName, ? extends Metric> metrics) {
        StringBuilder out = new StringBuilder("{");
        for (var entry : metrics.entrySet()) {
            MetricName name = entry.getKey();
            String node = name.tags().get("node-id");
            if (name.name().equals("request-total") && node != null) {
                long count = Math.round(((Number) entry.getValue().metricValue()).doubleValue());
                out.append(out.length() > 1 ? "," : "").append(quote(node)).append(':').append(count);
            }
        }
        return out.append('}').toString();
    }

    private static String sha(byte[] value) {
        try {
            byte[] digest = MessageDigest.getInstance("SHA-256").digest(value);
            return HexFormat.of().formatHex(digest, 0, 8);
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    private static String quote(String s) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                default -> out.append(c < 0x20 ? String.format("\\u%04x", (int) c) : String.valueOf(c));
            }
        }
        return out.append('"').toString();
    }

    private static synchronized void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
