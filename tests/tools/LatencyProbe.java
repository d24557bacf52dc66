import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Produce and end-to-end latency of single records, in microseconds.
 *
 * <p>Kafka's own org.apache.kafka.tools.EndToEndLatency keeps its percentiles in whole
 * milliseconds, too coarse to tell whether a proxy adds less than 1 ms. This does the same
 * thing with System.nanoTime: one record in flight at a time, produced with acks=all and
 * linger.ms=0 to partition 0, read back by a consumer assigned to that partition. It
 * records, per record, the time to the producer's acknowledgement and the time until the
 * consumer returned it, and checks that the consumer got exactly the bytes that were sent.
 *
 * <p>The consumer keeps Kafka's default long poll (fetch.max.wait.ms=500, fetch.min.bytes=1):
 * the broker answers the parked fetch as soon as the high watermark covers the record, so
 * the measurement needs no busy polling, which on a small machine would steal CPU from the
 * broker and the proxy being measured.
 *
 * <p>With {@code --rate R}, it measures producer acknowledgements only, at a fixed pace instead
 * of one record at a time: records are sent R per second on a schedule (linger.ms=0), each
 * timed from just before send() to its acknowledgement callback, once for every acks setting
 * listed in {@code --acks} (default "all"), each with a producer of its own. The warm-up
 * records go first at the same pace and are not counted. No consumer runs in this mode. It
 * also counts the measured sends that went out more than one slot late: the sender itself was
 * held up, so the machine rather than the path under test may have set the percentiles.
 *
 * <pre>
 * java -cp 'build/kafka-jars/*:CLASSES' LatencyProbe --bootstrap HOST:PORT --topic T \
 *     --records 2000 --warmup 200 --record-size 1024
 * java -cp 'build/kafka-jars/*:CLASSES' LatencyProbe --bootstrap HOST:PORT --topic T \
 *     --records 4000 --warmup 1000 --record-size 1024 --rate 1000 --acks 1,all
 * </pre>
 *
 * <p>{@code --config FILE}: client properties (e.g. security.protocol=SSL and a truststore)
 * given to the producer and the consumer.
 *
 * Prints one JSON line; exits 1 with a message on stderr on any failure.
 */
public class LatencyProbe {
    private static final long RECORD_TIMEOUT_NS = TimeUnit.SECONDS.toNanos(30);

    /** Client properties from {@code --config FILE} (security settings), given to every client. */
    private static final Properties CONFIG = new Properties();

    public static void main(String[] args) {
        try {
            System.out.println(run(args));
        } catch (Exception e) {
            System.err.println("LatencyProbe: " + e);
            System.exit(1);
        }
    }

    private static String arg(String[] args, String name) {
        for (int i = 0; i + 1 < args.length; i++) {
            if (args[i].equals(name)) {
                return args[i + 1];
            }
        }
        throw new IllegalArgumentException("missing " + name);
    }

    private static String arg(String[] args, String name, String dflt) {
        for (int i = 0; i + 1 < args.length; i++) {
            if (args[i].equals(name)) {
                return args[i + 1];
            }
        }
        return dflt;
    }

    static String run(String[] args) throws Exception {
        String config = arg(args, "--config", null);
        if (config != null) {
            try (java.io.Reader r = java.nio.file.Files.newBufferedReader(java.nio.file.Path.of(config))) {
                CONFIG.load(r);
            }
        }
        String bootstrap = arg(args, "--bootstrap");
        String topic = arg(args, "--topic");
        int records = Integer.parseInt(arg(args, "--records"));
        int warmup = Integer.parseInt(arg(args, "--warmup"));
        int size = Integer.parseInt(arg(args, "--record-size"));
        if (size < Long.BYTES || records < 1 || warmup < 0) {
            throw new IllegalArgumentException("need --record-size >= 8, --records >= 1, --warmup >= 0");
        }
        String rate = arg(args, "--rate", null);
        if (rate != null) {
            return runPaced(bootstrap, topic, records, warmup, size, Double.parseDouble(rate),
                    arg(args, "--acks", "all").split(","));
        }

        Properties pp = new Properties();
        pp.putAll(CONFIG);
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        pp.put(ProducerConfig.CLIENT_ID_CONFIG, "kshim-latency-probe");
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());

        Properties cp = new Properties();
        cp.putAll(CONFIG);
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.CLIENT_ID_CONFIG, "kshim-latency-probe");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "latest");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());

        long[] ack = new long[records];
        long[] e2e = new long[records];
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp);
             KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            // assign() rather than subscribe(): no group coordinator, no rebalance, so the
            // first measured record does not wait for a join.
            consumer.assign(List.of(tp));
            consumer.seekToEnd(List.of(tp));
            consumer.position(tp, Duration.ofSeconds(30));

            byte[] payload = new byte[size];
            new Random(42).nextBytes(payload);
            AtomicLong ackedAt = new AtomicLong();
            for (int i = 0; i < warmup + records; i++) {
                ByteBuffer.wrap(payload).putLong(0, i);
                ackedAt.set(0);
                long start = System.nanoTime();
                Future<RecordMetadata> sent = producer.send(
                        new ProducerRecord<>(topic, 0, null, payload),
                        (md, err) -> ackedAt.set(System.nanoTime()));
                ConsumerRecord<byte[], byte[]> got = null;
                while (got == null) {
                    if (System.nanoTime() - start > RECORD_TIMEOUT_NS) {
                        throw new IllegalStateException("record " + i + " was not consumed within 30 s");
                    }
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                        if (got != null) {
                            throw new IllegalStateException("more than one record came back for record " + i);
                        }
                        got = r;
                    }
                }
                long received = System.nanoTime();
                // get() rethrows a failed send; the callback has run once the future is done.
                RecordMetadata md = sent.get(30, TimeUnit.SECONDS);
                if (got.offset() != md.offset() || !Arrays.equals(got.value(), payload)) {
                    throw new IllegalStateException("record " + i + " came back at offset " + got.offset()
                            + " (produced at " + md.offset() + ") or with different bytes");
                }
                if (i >= warmup) {
                    ack[i - warmup] = ackedAt.get() - start;
                    e2e[i - warmup] = received - start;
                }
            }
        }
        Arrays.sort(ack);
        Arrays.sort(e2e);
        return String.format(
                "{\"records\": %d, \"record_size\": %d, \"ack_p50_us\": %.1f, \"ack_p99_us\": %.1f, "
                        + "\"e2e_p50_us\": %.1f, \"e2e_p99_us\": %.1f, \"e2e_p999_us\": %.1f, \"e2e_max_us\": %.1f}",
                records, size, pct(ack, 0.50), pct(ack, 0.99),
                pct(e2e, 0.50), pct(e2e, 0.99), pct(e2e, 0.999), e2e[e2e.length - 1] / 1000.0);
    }

    /**
     * Acknowledgement latency at a fixed send rate, for each acks setting in turn. Every
     * record is sent at its slot on the schedule (or at once when the sender is late) and
     * timed from just before send() to its callback.
     */
    static String runPaced(String bootstrap, String topic, int records, int warmup, int size,
                           double rate, String[] acksList) throws Exception {
        if (!(rate > 0)) {
            throw new IllegalArgumentException("--rate must be > 0");
        }
        long intervalNs = Math.max(1L, (long) (1e9 / rate));
        int total = warmup + records;
        byte[] payload = new byte[size];
        new Random(42).nextBytes(payload);
        StringBuilder out = new StringBuilder();
        out.append(String.format("{\"mode\": \"paced\", \"records\": %d, \"record_size\": %d, \"rate\": %.1f",
                records, size, rate));
        for (String acks : acksList) {
            Properties pp = new Properties();
            pp.putAll(CONFIG);
            pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            pp.put(ProducerConfig.ACKS_CONFIG, acks);
            pp.put(ProducerConfig.LINGER_MS_CONFIG, "0");
            pp.put(ProducerConfig.CLIENT_ID_CONFIG, "kshim-latency-probe-acks-" + acks);
            pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            if (!acks.equals("all") && !acks.equals("-1")) {
                // The idempotent producer (the default) insists on acks=all.
                pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
            }
            long[] lat = new long[total];
            CountDownLatch done = new CountDownLatch(total);
            AtomicReference<Exception> failure = new AtomicReference<>();
            long lateSends = 0;
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp)) {
                // The first send waits for metadata; do it before the schedule starts.
                producer.partitionsFor(topic);
                long t0 = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(50);
                for (int i = 0; i < total; i++) {
                    long due = t0 + i * intervalNs;
                    long left;
                    while ((left = due - System.nanoTime()) > 0) {
                        LockSupport.parkNanos(left);
                    }
                    if (-left > intervalNs && i >= warmup) {
                        lateSends++;
                    }
                    final int slot = i;
                    long start = System.nanoTime();
                    producer.send(new ProducerRecord<>(topic, 0, null, payload), (md, err) -> {
                        if (err != null) {
                            failure.compareAndSet(null, err);
                        } else {
                            lat[slot] = System.nanoTime() - start;
                        }
                        done.countDown();
                    });
                }
                producer.flush();
                if (!done.await(30, TimeUnit.SECONDS)) {
                    throw new IllegalStateException("acks=" + acks + ": " + done.getCount() + " records unacknowledged after 30 s");
                }
            }
            if (failure.get() != null) {
                throw new IllegalStateException("acks=" + acks + ": a send failed: " + failure.get());
            }
            long[] measured = Arrays.copyOfRange(lat, warmup, total);
            Arrays.sort(measured);
            out.append(String.format(", \"acks_%s\": {\"p50_us\": %.1f, \"p99_us\": %.1f, \"p999_us\": %.1f, "
                            + "\"max_us\": %.1f, \"late_sends\": %d, \"quantiles_us\": %s}",
                    acks, pct(measured, 0.50), pct(measured, 0.99), pct(measured, 0.999),
                    measured[measured.length - 1] / 1000.0, lateSends, quantiles(measured)));
        }
        return out.append("}").toString();
    }

    /** The distribution for a CDF plot: [q, microseconds] at q = 0.01 .. 0.99, 0.995, 0.999, 1. */
    private static String quantiles(long[] sorted) {
        StringBuilder b = new StringBuilder("[");
        for (int i = 1; i <= 102; i++) {
            double q = i <= 99 ? i / 100.0 : i == 100 ? 0.995 : i == 101 ? 0.999 : 1.0;
            b.append(i > 1 ? ", " : "").append(String.format("[%s, %.1f]", q, pct(sorted, q)));
        }
        return b.append("]").toString();
    }

    /** Nearest-rank percentile of sorted nanoseconds, in microseconds. */
    private static double pct(long[] sorted, double q) {
        int rank = (int) Math.ceil(q * sorted.length);
        rank = Math.max(1, Math.min(sorted.length, rank));
        return sorted[rank - 1] / 1000.0;
    }
}
