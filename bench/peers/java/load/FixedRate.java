/*
 * OpenMessaging-Benchmark-style fixed-rate load with the Java client: one producer
 * sends records of `--size` bytes at `--rate` records/s (a uniform schedule, as OMB's
 * rate limiter), a consumer in the same JVM reads them back. Publish latency is from
 * the send() call to its acknowledgement (acks=all), end-to-end latency from the
 * send() call to the consumer's poll returning the record (System.nanoTime written in
 * the record's first 8 bytes: one JVM, one clock). Records sent in the first
 * `--warmup` seconds are not sampled; the next `--seconds` are the steady state. `--rate 0` sends as
 * fast as the producer accepts (saturation) and reports the rate reached.
 *
 * Prints one JSON object: target and achieved rate, sent/acked/received counts,
 * errors, and publish and end-to-end percentiles in microseconds.
 *
 *   java -cp 'tests/peers/build/kafka-4.4.0/*:bench/peers/build/load' FixedRate \
 *       --bootstrap 127.0.0.1:9092 --topic t --rate 5000 --warmup 10 --seconds 60
 */
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

public final class FixedRate {
    /** Samples, in nanoseconds. */
    static final class Samples {
        private long[] values = new long[1 << 16];
        private int size;

        synchronized void add(long v) {
            if (size == values.length) {
                values = Arrays.copyOf(values, size * 2);
            }
            values[size++] = v;
        }

        synchronized long[] sorted() {
            long[] out = Arrays.copyOf(values, size);
            Arrays.sort(out);
            return out;
        }
    }

    private FixedRate() {
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        String bootstrap = args.get("bootstrap");
        String topic = args.get("topic");
        double rate = Double.parseDouble(args.getOrDefault("rate", "5000"));
        int size = Integer.parseInt(args.getOrDefault("size", "1024"));
        double warmup = Double.parseDouble(args.getOrDefault("warmup", "10"));
        double seconds = Double.parseDouble(args.getOrDefault("seconds", "60"));

        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", "all");
        p.put("linger.ms", args.getOrDefault("linger-ms", "1"));
        p.put("batch.size", "1048576");
        p.put("compression.type", "none");
        p.put("max.in.flight.requests.per.connection", "5");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("enable.auto.commit", "false");
        c.put("max.partition.fetch.bytes", "10485760");
        c.put("key.deserializer", ByteArrayDeserializer.class.getName());
        c.put("value.deserializer", ByteArrayDeserializer.class.getName());

        Samples publish = new Samples();
        Samples endToEnd = new Samples();
        AtomicLong acked = new AtomicLong();
        AtomicLong errors = new AtomicLong();
        AtomicLong received = new AtomicLong();
        AtomicBoolean stop = new AtomicBoolean();

        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
             KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c)) {
            List<TopicPartition> parts = new ArrayList<>();
            for (PartitionInfo info : producer.partitionsFor(topic)) {
                parts.add(new TopicPartition(topic, info.partition()));
            }
            consumer.assign(parts);
            consumer.seekToEnd(parts);
            for (TopicPartition tp : parts) {
                consumer.position(tp); // resolved now, before the first record is sent
            }
            // Samples count only records sent after the warm-up: an acknowledgement or a
            // read that comes later for a record sent during it is not the steady state.
            final long start = System.nanoTime();
            final long warmEnd = start + (long) (warmup * 1e9);
            Thread reader = new Thread(() -> {
                while (!stop.get()) {
                    ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
                    long now = System.nanoTime();
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        long sentNs = ByteBuffer.wrap(r.value()).getLong(0);
                        if (sentNs >= warmEnd) {
                            endToEnd.add(now - sentNs);
                        }
                        received.incrementAndGet();
                    }
                }
            }, "consumer");
            reader.start();

            byte[] template = new byte[size];
            for (int i = 0; i < size; i++) {
                template[i] = (byte) (i % 251);
            }
            long end = warmEnd + (long) (seconds * 1e9);
            long intervalNs = rate > 0 ? (long) (1e9 / rate) : 0;
            long sent = 0;
            long steadySent = 0;
            long steadyStart = 0;
            long ackedAtSteady = 0;
            long receivedAtSteady = 0;
            boolean steady = false;
            while (true) {
                long now = System.nanoTime();
                if (!steady && now >= warmEnd) {
                    steady = true;
                    steadyStart = now;
                    ackedAtSteady = acked.get();
                    receivedAtSteady = received.get();
                }
                if (now >= end) {
                    break;
                }
                if (intervalNs > 0) {
                    long due = start + sent * intervalNs;
                    if (due > now) {
                        LockSupport.parkNanos(due - now);
                        continue;
                    }
                }
                byte[] value = template.clone();
                long sendNs = System.nanoTime();
                ByteBuffer.wrap(value).putLong(0, sendNs);
                producer.send(new ProducerRecord<>(topic, value), (md, e) -> {
                    if (e != null) {
                        errors.incrementAndGet();
                    } else {
                        if (sendNs >= warmEnd) {
                            publish.add(System.nanoTime() - sendNs);
                        }
                        acked.incrementAndGet();
                    }
                });
                sent++;
                if (steady) {
                    steadySent++;
                }
            }
            long steadyNs = System.nanoTime() - steadyStart;
            long ackedSteady = acked.get() - ackedAtSteady;
            long receivedSteady = received.get() - receivedAtSteady;
            producer.flush();
            long drainUntil = System.nanoTime() + 10_000_000_000L;
            while (received.get() < sent && System.nanoTime() < drainUntil) {
                Thread.sleep(10);
            }
            stop.set(true);
            reader.join();
            StringBuilder out = new StringBuilder("{");
            out.append("\"target_rate\":").append(rate);
            out.append(",\"achieved_rate\":").append(round(steadySent / (steadyNs / 1e9)));
            out.append(",\"acked_rate\":").append(round(ackedSteady / (steadyNs / 1e9)));
            out.append(",\"received_rate\":").append(round(receivedSteady / (steadyNs / 1e9)));
            out.append(",\"steady_seconds\":").append(round(steadyNs / 1e9));
            out.append(",\"sent\":").append(sent);
            out.append(",\"acked\":").append(acked.get());
            out.append(",\"received\":").append(received.get());
            out.append(",\"errors\":").append(errors.get());
            out.append(",\"record_bytes\":").append(size);
            out.append(",\"publish\":").append(summary(publish.sorted()));
            out.append(",\"end_to_end\":").append(summary(endToEnd.sorted()));
            out.append("}");
            System.out.println(out);
        }
    }

    private static double round(double v) {
        return Math.round(v * 10) / 10.0;
    }

    private static String summary(long[] ns) {
        if (ns.length == 0) {
            return "{\"count\":0}";
        }
        return String.format(
                "{\"count\":%d,\"p50_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,\"max_us\":%.1f,\"mean_us\":%.1f}",
                ns.length, pct(ns, 50) / 1e3, pct(ns, 99) / 1e3, pct(ns, 99.9) / 1e3,
                ns[ns.length - 1] / 1e3, Arrays.stream(ns).average().orElse(0) / 1e3);
    }

    /** Nearest rank, as bench/proxy/stats.py. */
    private static double pct(long[] sorted, double q) {
        int rank = (int) Math.max(0, Math.min(sorted.length - 1, Math.round(q / 100 * sorted.length + 0.5) - 1));
        return sorted[rank];
    }
}
