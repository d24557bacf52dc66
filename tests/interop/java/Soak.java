// The client load of the soak (scripts/soak.sh, driven by tests/interop/soak.py): real Kafka
// Java clients through a kshim cluster for a given time, checking what they get back.
//
//   Soak --bootstrap KSHIMS --direct BROKERS --seconds S --records-per-s R [--size BYTES] [--bulk-direct true]
//        [--keys K] [--linger-ms L] [--probe-per-s P] [--drain-s D] [--admin-every-ms MS]
//        [--stop-file PATH] [--quiet-file PATH] [--prop k=v ...]
//
// The load runs for S seconds, or until the stop file exists if that comes first (the driver
// ends a quick run once its faults have healed). While the quiet file exists, the bulk producer
// and the Admin client do nothing and the probes go on: the driver's windows for the end-to-end
// latency rule.
//
// Through kshim (the --prop settings, such as TLS, apply to these clients only):
//   - a producer (acks=all, idempotent, linger L ms) writes R keyed records/s of BYTES to soak-data; record
//     i of key k carries "k:i:" and padding, so the consumers can tell order and loss;
//   - two consumers of one KIP-848 group (group.protocol=consumer) read soak-data: every
//     record is marked as seen, and a record of a key written after another (a higher offset)
//     that carries a lower sequence number is counted out of order;
//   - a share consumer (KIP-932) reads soak-data in a share group of its own;
//   - an Admin client creates a topic every MS and deletes the one before;
//   - a latency probe producer writes P records/s (acks=all, no linger) to soak-probe.
// Directly to the brokers: a second probe producer writes the same P records/s to soak-probe at
// the same instants, so that the two ack-latency series see the same machine and brokers.
//
// Output, one JSON object per line on stdout:
//   {"kind":"tick","t":MS,...}     every second: the counts of that second, and histograms of
//                                  ack latency: {"BUCKET":COUNT}, bucket = floor(20 ln(micros))
//   {"kind":"error","t":MS,"what":W,"error":E}   a failed operation (at most 20 per second)
//   {"kind":"final",...}           after S seconds and the drain: acked, lost, out_of_order
// Exit 0 once the final line is printed, 2 when the load could not start.

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class Soak {
    static final String DATA = "soak-data";
    static final String PROBE = "soak-probe";
    static final AtomicBoolean producing = new AtomicBoolean(true);
    // While this file exists the bulk producer and the Admin client pause (--quiet-file); null: never.
    static volatile Path quietFile;

    static boolean quiet() {
        Path f = quietFile;
        return f != null && Files.exists(f);
    }
    static final AtomicBoolean running = new AtomicBoolean(true);

    /** Counts of one second, swapped out by the ticker. */
    static final class Window {
        final AtomicLong sent = new AtomicLong(), acked = new AtomicLong(), failed = new AtomicLong();
        final AtomicLong consumed = new AtomicLong(), share = new AtomicLong();
        final AtomicLong adminOk = new AtomicLong(), adminFailed = new AtomicLong();
        final AtomicLong probeFailedVia = new AtomicLong(), probeFailedDirect = new AtomicLong();
        final Map<Integer, AtomicLong> bulk = new ConcurrentHashMap<>();
        final Map<Integer, AtomicLong> via = new ConcurrentHashMap<>();
        final Map<Integer, AtomicLong> direct = new ConcurrentHashMap<>();
        final AtomicInteger errorsPrinted = new AtomicInteger();
    }

    static volatile Window window = new Window();

    static void latency(Map<Integer, AtomicLong> hist, long nanos) {
        int bucket = (int) Math.floor(20 * Math.log(Math.max(1.0, nanos / 1000.0)));
        hist.computeIfAbsent(bucket, b -> new AtomicLong()).incrementAndGet();
    }

    static synchronized void print(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20 || c > 0x7e) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static void error(String what, Throwable e) {
        Window w = window;
        if (w.errorsPrinted.incrementAndGet() > 20) return;
        Throwable root = e;
        while (root.getCause() != null && root.getCause() != root) root = root.getCause();
        print("{\"kind\":\"error\",\"t\":" + System.currentTimeMillis() + ",\"what\":" + quote(what)
            + ",\"error\":" + quote(root.getClass().getSimpleName() + ": " + root.getMessage()) + "}");
    }

    static String hist(Map<Integer, AtomicLong> h) {
        StringBuilder b = new StringBuilder("{");
        h.forEach((k, v) -> b.append(b.length() > 1 ? "," : "").append('"').append(k).append("\":").append(v.get()));
        return b.append('}').toString();
    }

    // ---------------------------------------------------------------- what the consumers saw

    static int keys;
    static BitSet[] acked, seen;
    static long[] lastOffset, lastSeq;
    static final AtomicLong outOfOrder = new AtomicLong();
    static final List<String> outOfOrderSample = new ArrayList<>();

    static void consumed(ConsumerRecord<String, String> r) {
        String[] parts = r.value().split(":", 3);
        int key = Integer.parseInt(parts[0]);
        int seq = Integer.parseInt(parts[1]);
        synchronized (seen[key]) {
            seen[key].set(seq);
            if (r.offset() > lastOffset[key]) {
                if (seq < lastSeq[key]) {
                    outOfOrder.incrementAndGet();
                    synchronized (outOfOrderSample) {
                        if (outOfOrderSample.size() < 10) {
                            outOfOrderSample.add(key + ":" + seq + " at offset " + r.offset() + " after " + lastSeq[key]);
                        }
                    }
                }
                lastOffset[key] = r.offset();
                lastSeq[key] = seq;
            }
        }
        window.consumed.incrementAndGet();
    }

    // ---------------------------------------------------------------- clients

    static Properties common(String bootstrap, Map<String, String> props) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.putAll(props);
        return p;
    }

    static KafkaProducer<String, String> producer(Properties p, int lingerMs) {
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.LINGER_MS_CONFIG, String.valueOf(lingerMs));
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "60000");
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static void createTopics(Admin admin) throws Exception {
        for (String topic : new String[] {DATA, PROBE}) {
            // Five minutes of records are kept (the consumers keep up within seconds): hours of
            // load fit on one machine's disk.
            NewTopic t = new NewTopic(topic, 6, (short) 3).configs(Map.of("min.insync.replicas", "2",
                "retention.ms", "300000", "segment.bytes", "33554432"));
            try {
                admin.createTopics(List.of(t)).all().get();
            } catch (java.util.concurrent.ExecutionException e) {
                if (!(e.getCause() instanceof TopicExistsException)) throw e;
            }
        }
    }

    static void bulk(KafkaProducer<String, String> producer, int perSecond, int size) throws InterruptedException {
        int[] next = new int[keys];
        StringBuilder pad = new StringBuilder();
        while (pad.length() < size) pad.append('x');
        long started = System.nanoTime();
        long sent = 0;
        int key = 0;
        long quietChecked = 0;
        boolean quiet = false;
        while (producing.get()) {
            if (System.nanoTime() - quietChecked > 50_000_000L) {
                quietChecked = System.nanoTime();
                quiet = quiet();
            }
            if (quiet) {
                Thread.sleep(20);
                continue;  // after the window, the catch-up below is at most a tenth of a second's records
            }
            long due = (long) ((System.nanoTime() - started) / 1e9 * perSecond);
            if (due - sent > perSecond) {  // stalled for over a second (a fault): do not burst
                sent = due - perSecond / 10;
            }
            if (sent >= due) {
                Thread.sleep(2);
                continue;
            }
            final int k = key, seq = next[key]++;
            key = (key + 1) % keys;
            sent++;
            String head = k + ":" + seq + ":";
            String value = head + pad.substring(0, Math.max(0, size - head.length()));
            long t0 = System.nanoTime();
            window.sent.incrementAndGet();
            try {
                producer.send(new ProducerRecord<>(DATA, "key-" + k, value), (md, e) -> {
                    if (e != null) {
                        window.failed.incrementAndGet();
                        error("produce", e);
                        return;
                    }
                    latency(window.bulk, System.nanoTime() - t0);
                    synchronized (seen[k]) {
                        acked[k].set(seq);
                    }
                    window.acked.incrementAndGet();
                });
            } catch (Exception e) {
                window.failed.incrementAndGet();
                error("produce", e);
            }
        }
    }

    static void probes(KafkaProducer<String, String> via, KafkaProducer<String, String> direct, int perSecond)
            throws InterruptedException {
        long intervalNanos = 1_000_000_000L / Math.max(1, perSecond);
        long next = System.nanoTime();
        int i = 0;
        while (producing.get()) {
            long now = System.nanoTime();
            if (now < next) {
                Thread.sleep(Math.max(0, (next - now) / 1_000_000), (int) ((next - now) % 1_000_000));
                continue;
            }
            next = Math.max(next + intervalNanos, now - 1_000_000_000L);
            String key = "probe-" + (i++ % 6);
            for (boolean isVia : new boolean[] {true, false}) {
                long t0 = System.nanoTime();
                try {
                    (isVia ? via : direct).send(new ProducerRecord<>(PROBE, key, "p"), (md, e) -> {
                        if (e != null) {
                            (isVia ? window.probeFailedVia : window.probeFailedDirect).incrementAndGet();
                            error(isVia ? "probe via kshim" : "probe direct", e);
                        } else {
                            latency(isVia ? window.via : window.direct, System.nanoTime() - t0);
                        }
                    });
                } catch (Exception e) {
                    (isVia ? window.probeFailedVia : window.probeFailedDirect).incrementAndGet();
                    error(isVia ? "probe via kshim" : "probe direct", e);
                }
            }
        }
    }

    static Thread daemon(String name, Runnable body) {
        Thread t = new Thread(() -> {
            try {
                body.run();
            } catch (Throwable e) {
                error(name + " thread", e);
            }
        }, name);
        t.setDaemon(true);
        t.start();
        return t;
    }

    interface Body { void run() throws Exception; }

    static Runnable loop(Body b) {
        return () -> {
            try {
                b.run();
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        };
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new HashMap<>();
        Map<String, String> props = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            if (argv[i].equals("--prop")) {
                String[] kv = argv[i + 1].split("=", 2);
                props.put(kv[0], kv[1]);
            } else {
                args.put(argv[i], argv[i + 1]);
            }
        }
        String bootstrap = args.get("--bootstrap"), directBootstrap = args.get("--direct");
        int seconds = Integer.parseInt(args.get("--seconds"));
        int perSecond = Integer.parseInt(args.get("--records-per-s"));
        int size = Integer.parseInt(args.getOrDefault("--size", "1024"));
        int probePerSecond = Integer.parseInt(args.getOrDefault("--probe-per-s", "100"));
        int drainSeconds = Integer.parseInt(args.getOrDefault("--drain-s", "90"));
        int lingerMs = Integer.parseInt(args.getOrDefault("--linger-ms", "5"));
        long adminEveryMs = Long.parseLong(args.getOrDefault("--admin-every-ms", "5000"));
        keys = Integer.parseInt(args.getOrDefault("--keys", "120"));
        acked = new BitSet[keys];
        seen = new BitSet[keys];
        lastOffset = new long[keys];
        lastSeq = new long[keys];
        for (int k = 0; k < keys; k++) {
            acked[k] = new BitSet();
            seen[k] = new BitSet();
            lastOffset[k] = -1;
            lastSeq[k] = -1;
        }

        Admin admin = Admin.create(common(bootstrap, props));
        try {
            createTopics(admin);
            ConfigResource shareGroup = new ConfigResource(ConfigResource.Type.GROUP, "soak-share");
            admin.incrementalAlterConfigs(Map.of(shareGroup, List.of(new AlterConfigOp(
                new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET)))).all().get();
        } catch (Exception e) {
            error("setup", e);
            print("{\"kind\":\"final\",\"error\":" + quote("could not create the soak topics: " + e) + "}");
            System.exit(2);
        }

        List<KafkaConsumer<String, String>> consumers = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            Properties p = common(bootstrap, props);
            p.put(ConsumerConfig.GROUP_ID_CONFIG, "soak-verify");
            p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
            p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            KafkaConsumer<String, String> c = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
            consumers.add(c);
            daemon("consumer-" + i, loop(() -> {
                c.subscribe(List.of(DATA));
                while (running.get()) {
                    try {
                        for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) consumed(r);
                    } catch (org.apache.kafka.common.errors.WakeupException e) {
                        return;
                    } catch (Exception e) {
                        error("consume", e);
                        Thread.sleep(200);
                    }
                }
            }));
        }
        Properties sp = common(bootstrap, props);
        sp.put(ConsumerConfig.GROUP_ID_CONFIG, "soak-share");
        KafkaShareConsumer<String, String> share =
            new KafkaShareConsumer<>(sp, new StringDeserializer(), new StringDeserializer());
        daemon("share", loop(() -> {
            share.subscribe(List.of(DATA));
            while (running.get()) {
                try {
                    int n = share.poll(Duration.ofMillis(200)).count();
                    window.share.addAndGet(n);
                    if (n > 0) share.commitAsync();
                } catch (org.apache.kafka.common.errors.WakeupException e) {
                    return;
                } catch (Exception e) {
                    error("share consume", e);
                    Thread.sleep(200);
                }
            }
        }));
        daemon("admin", loop(() -> {
            String previous = null;
            for (int n = 0; producing.get(); n++) {
                while (quiet() && producing.get()) Thread.sleep(100);
                String topic = "soak-admin-" + n;
                try {
                    admin.createTopics(List.of(new NewTopic(topic, 1, (short) 3))).all().get();
                    String gone = previous;
                    previous = topic;
                    if (gone != null) {
                        try {
                            admin.deleteTopics(List.of(gone)).all().get();
                        } catch (java.util.concurrent.ExecutionException e) {
                            // A delete whose answer was lost in a fault is retried by the
                            // admin client and finds the topic gone: what was asked for.
                            if (!(e.getCause() instanceof UnknownTopicOrPartitionException)) throw e;
                        }
                    }
                    window.adminOk.incrementAndGet();
                } catch (Exception e) {
                    window.adminFailed.incrementAndGet();
                    error("admin", e);
                }
                Thread.sleep(adminEveryMs);
            }
        }));

        // --bulk-direct: the bulk producer writes to the brokers themselves, to tell what the
        // producer does under the faults from what kshim does.
        boolean bulkDirect = Boolean.parseBoolean(args.getOrDefault("--bulk-direct", "false"));
        Properties bulkProps = bulkDirect ? common(directBootstrap, Map.of()) : common(bootstrap, props);
        // Named, so that its log lines can be told apart (soak.py --debug-producer).
        bulkProps.put(ProducerConfig.CLIENT_ID_CONFIG, "soak-bulk");
        // Batches of 64 KiB (64 records), as a producer of megabytes a second is set up: with the
        // default 16 KiB (15 records), at most 5 requests in flight and one batch per partition
        // in each, the busiest partition could not be drained faster than 75 records per round
        // trip. On 2 cores the producer then ran with its 32 MiB buffer full (1,000-2,500 of the
        // 5,120 records a second it offers acknowledged), its batches queued for tens of seconds,
        // and a leader move that slowed that partition for long enough expired them.
        bulkProps.put(ProducerConfig.BATCH_SIZE_CONFIG, "65536");
        KafkaProducer<String, String> producer = producer(bulkProps, lingerMs);
        KafkaProducer<String, String> probeVia = producer(common(bootstrap, props), 0);
        KafkaProducer<String, String> probeDirect = producer(common(directBootstrap, Map.of()), 0);
        quietFile = args.containsKey("--quiet-file") ? Path.of(args.get("--quiet-file")) : null;
        Thread bulkThread = daemon("bulk", loop(() -> bulk(producer, perSecond, size)));
        Thread probeThread = daemon("probe", loop(() -> probes(probeVia, probeDirect, probePerSecond)));

        Thread ticker = daemon("ticker", loop(() -> {
            long next = System.currentTimeMillis() / 1000 * 1000 + 1000;
            while (running.get()) {
                Thread.sleep(Math.max(1, next - System.currentTimeMillis()));
                Window w = window;
                window = new Window();
                print("{\"kind\":\"tick\",\"t\":" + next + ",\"sent\":" + w.sent + ",\"acked\":" + w.acked
                    + ",\"failed\":" + w.failed + ",\"consumed\":" + w.consumed + ",\"share\":" + w.share
                    + ",\"admin_ok\":" + w.adminOk + ",\"admin_failed\":" + w.adminFailed
                    + ",\"probe_failed_via\":" + w.probeFailedVia + ",\"probe_failed_direct\":" + w.probeFailedDirect
                    + ",\"out_of_order\":" + outOfOrder.get()
                    + ",\"bulk\":" + hist(w.bulk) + ",\"via\":" + hist(w.via) + ",\"direct\":" + hist(w.direct) + "}");
                next += 1000;
            }
        }));

        long loadEnds = System.currentTimeMillis() + seconds * 1000L;
        Path stopFile = args.containsKey("--stop-file") ? Path.of(args.get("--stop-file")) : null;
        while (System.currentTimeMillis() < loadEnds && (stopFile == null || !Files.exists(stopFile))) {
            Thread.sleep(200);
        }
        producing.set(false);
        bulkThread.join(10_000);
        probeThread.join(10_000);
        // Every record sent is now either acknowledged or failed.
        producer.close(Duration.ofSeconds(150));
        probeVia.close(Duration.ofSeconds(30));
        probeDirect.close(Duration.ofSeconds(30));

        long deadline = System.currentTimeMillis() + drainSeconds * 1000L;
        long lost;
        while (true) {
            lost = 0;
            for (int k = 0; k < keys; k++) {
                synchronized (seen[k]) {
                    BitSet missing = (BitSet) acked[k].clone();
                    missing.andNot(seen[k]);
                    lost += missing.cardinality();
                }
            }
            if (lost == 0 || System.currentTimeMillis() > deadline) break;
            Thread.sleep(500);
        }
        running.set(false);
        long totalAcked = 0;
        // Records the consumers read whose send never succeeded (it failed, or expired): written
        // by a broker whose answer never reached the producer (or came as an error).
        long writtenUnacked = 0;
        List<String> lostSample = new ArrayList<>();
        for (int k = 0; k < keys; k++) {
            synchronized (seen[k]) {
                totalAcked += acked[k].cardinality();
                BitSet unacked = (BitSet) seen[k].clone();
                unacked.andNot(acked[k]);
                writtenUnacked += unacked.cardinality();
                BitSet missing = (BitSet) acked[k].clone();
                missing.andNot(seen[k]);
                for (int s = missing.nextSetBit(0); s >= 0 && lostSample.size() < 10; s = missing.nextSetBit(s + 1)) {
                    lostSample.add(k + ":" + s);
                }
            }
        }
        StringBuilder lostJson = new StringBuilder("[");
        for (String s : lostSample) lostJson.append(lostJson.length() > 1 ? "," : "").append(quote(s));
        StringBuilder oooJson = new StringBuilder("[");
        synchronized (outOfOrderSample) {
            for (String s : outOfOrderSample) oooJson.append(oooJson.length() > 1 ? "," : "").append(quote(s));
        }
        ticker.join(2_000);
        print("{\"kind\":\"final\",\"acked\":" + totalAcked + ",\"lost\":" + lost + ",\"lost_sample\":" + lostJson + "]"
            + ",\"out_of_order\":" + outOfOrder.get() + ",\"out_of_order_sample\":" + oooJson + "]"
            + ",\"written_unacknowledged\":" + writtenUnacked + "}");
        for (KafkaConsumer<String, String> c : consumers) c.wakeup();
        share.wakeup();
        System.exit(0);
    }
}
