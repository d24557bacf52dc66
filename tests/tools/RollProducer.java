// The producer of tests/tools/roll_stall.py: an idempotent acks=all producer of 1 KiB keyed
// records, as the soak's bulk producer (tests/interop/java/Soak.java), counting what each
// partition had acknowledged and what failed, for a reproduction of the soak's stalls after a
// partition leader's broker stops.
//
//   java RollProducer create --bootstrap B --topic T [--partitions 6]
//   java RollProducer produce --bootstrap B --topic T --seconds S [--records-per-s R] [--bytes 1024]
//        [--keys 120] [--linger-ms 5] [--stop-file F] [--drain-s 150]
//
// stdout carries JSON lines only (ev = start, tick, fail, end); the client's own logging goes
// where the log4j2 configuration given to the JVM says (roll_stall.py writes one that puts the
// Sender, the TransactionManager and NetworkClient at DEBUG into a file).
//
// A "fail" line is one failed batch: the records of a batch fail with one exception object, and
// the lines group the records by (partition, exception object). created_ms is when send() took
// the first of them (the batch was made within linger.ms of it), last_created_ms the last one.

import java.io.File;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLongArray;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.Utils;

public class RollProducer {
    static Map<String, String> parse(String[] args, int from) {
        Map<String, String> m = new HashMap<>();
        for (int i = from; i + 1 < args.length; i += 2) m.put(args[i], args[i + 1]);
        return m;
    }

    static String q(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static String arr(AtomicLongArray a) {
        StringBuilder b = new StringBuilder("[");
        for (int i = 0; i < a.length(); i++) {
            if (i > 0) b.append(',');
            b.append(a.get(i));
        }
        return b.append(']').toString();
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) throw new IllegalArgumentException("create | produce");
        Map<String, String> a = parse(args, 1);
        String bootstrap = a.get("--bootstrap");
        String topic = a.getOrDefault("--topic", "roll-data");
        if (args[0].equals("create")) {
            create(bootstrap, topic, Integer.parseInt(a.getOrDefault("--partitions", "6")));
        } else {
            produce(bootstrap, topic, a);
        }
    }

    static void create(String bootstrap, String topic, int partitions) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(p)) {
            // Five minutes of records are kept, as the soak's: a long run fits on the disk.
            NewTopic t = new NewTopic(topic, partitions, (short) 3).configs(Map.of("min.insync.replicas", "2",
                "retention.ms", "300000", "segment.bytes", "33554432"));
            try {
                admin.createTopics(List.of(t)).all().get();
            } catch (java.util.concurrent.ExecutionException e) {
                if (!(e.getCause() instanceof TopicExistsException)) throw e;
            }
        }
        emit("{\"ev\":\"created\",\"topic\":" + q(topic) + ",\"partitions\":" + partitions + "}");
    }

    static final class Failed {
        int partition;
        long records;
        long firstCreated, lastCreated, firstReported, lastReported;
        RuntimeException e;
    }

    static void produce(String bootstrap, String topic, Map<String, String> a) throws Exception {
        int seconds = Integer.parseInt(a.getOrDefault("--seconds", "600"));
        int perSecond = Integer.parseInt(a.getOrDefault("--records-per-s", "5120"));
        int size = Integer.parseInt(a.getOrDefault("--bytes", "1024"));
        int keys = Integer.parseInt(a.getOrDefault("--keys", "120"));
        int partitions = Integer.parseInt(a.getOrDefault("--partitions", "6"));
        int drainS = Integer.parseInt(a.getOrDefault("--drain-s", "150"));
        File stopFile = a.containsKey("--stop-file") ? new File(a.get("--stop-file")) : null;

        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", "roll-producer");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.LINGER_MS_CONFIG, a.getOrDefault("--linger-ms", "5"));
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "60000");
        // Everything else at the client's defaults (request.timeout.ms 30 s, delivery.timeout.ms
        // 120 s, max.in.flight.requests.per.connection 5, batch.size 16 KiB), as the soak's.

        AtomicLongArray sent = new AtomicLongArray(partitions);
        AtomicLongArray acked = new AtomicLongArray(partitions);
        AtomicLongArray failed = new AtomicLongArray(partitions);
        AtomicLongArray lastAck = new AtomicLongArray(partitions);
        IdentityHashMap<RuntimeException, Failed> failures = new IdentityHashMap<>();
        AtomicBoolean producing = new AtomicBoolean(true);

        String[] keyNames = new String[keys];
        int[] keyPartition = new int[keys];
        for (int k = 0; k < keys; k++) {
            keyNames[k] = "key-" + k;
            // The default partitioner's choice for a keyed record (BuiltInPartitioner.partitionForKey).
            keyPartition[k] = Utils.toPositive(Utils.murmur2(keyNames[k].getBytes())) % partitions;
        }
        StringBuilder padB = new StringBuilder();
        while (padB.length() < size) padB.append('x');
        String pad = padB.toString();

        KafkaProducer<String, String> producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
        long start = System.currentTimeMillis();
        emit("{\"ev\":\"start\",\"t\":" + start + ",\"bootstrap\":" + q(bootstrap) + ",\"records_per_s\":" + perSecond + "}");

        Thread ticker = new Thread(() -> {
            long n = 0;
            while (true) {
                try {
                    Thread.sleep(1000);
                } catch (InterruptedException e) {
                    return;
                }
                flushFailures(failures, false);
                long now = System.currentTimeMillis();
                StringBuilder out = new StringBuilder("[");
                for (int i = 0; i < partitions; i++) {
                    if (i > 0) out.append(',');
                    out.append(sent.get(i) - acked.get(i) - failed.get(i));
                }
                out.append(']');
                emit("{\"ev\":\"tick\",\"t\":" + now + ",\"sent\":" + arr(sent) + ",\"acked\":" + arr(acked)
                    + ",\"failed\":" + arr(failed) + ",\"outstanding\":" + out + ",\"last_ack\":" + arr(lastAck)
                    + "}");
                n++;
            }
        }, "ticker");
        ticker.setDaemon(true);
        ticker.start();

        long started = System.nanoTime();
        long deadline = started + seconds * 1_000_000_000L;
        long count = 0;
        int key = 0;
        int[] next = new int[keys];
        while (System.nanoTime() < deadline && (stopFile == null || !stopFile.exists())) {
            long due = (long) ((System.nanoTime() - started) / 1e9 * perSecond);
            if (due - count > perSecond) {  // stalled for over a second: do not burst
                count = due - perSecond / 10;
            }
            if (count >= due) {
                Thread.sleep(2);
                continue;
            }
            final int k = key, seq = next[key]++;
            key = (key + 1) % keys;
            count++;
            final int part = keyPartition[k];
            final long created = System.currentTimeMillis();
            String head = k + ":" + seq + ":";
            String value = head + pad.substring(0, Math.max(0, size - head.length()));
            sent.incrementAndGet(part);
            try {
                producer.send(new ProducerRecord<>(topic, keyNames[k], value), (md, e) -> {
                    int pp = md != null && md.partition() >= 0 ? md.partition() : part;
                    if (e == null) {
                        acked.incrementAndGet(pp);
                        lastAck.set(pp, System.currentTimeMillis());
                        return;
                    }
                    failed.incrementAndGet(pp);
                    RuntimeException re = e instanceof RuntimeException ? (RuntimeException) e : new RuntimeException(e);
                    synchronized (failures) {
                        Failed f = failures.get(re);
                        long now = System.currentTimeMillis();
                        if (f == null) {
                            f = new Failed();
                            f.partition = pp;
                            f.e = re;
                            f.firstCreated = created;
                            f.lastCreated = created;
                            f.firstReported = now;
                            failures.put(re, f);
                        }
                        f.records++;
                        f.firstCreated = Math.min(f.firstCreated, created);
                        f.lastCreated = Math.max(f.lastCreated, created);
                        f.lastReported = now;
                    }
                });
            } catch (Exception e) {
                failed.incrementAndGet(part);
                emit("{\"ev\":\"send_error\",\"t\":" + System.currentTimeMillis() + ",\"partition\":" + part
                    + ",\"exception\":" + q(e.getClass().getName()) + ",\"message\":" + q(e.getMessage()) + "}");
            }
        }
        producing.set(false);
        long stopSending = System.currentTimeMillis();
        emit("{\"ev\":\"stop_sending\",\"t\":" + stopSending + "}");
        // What is outstanding is acknowledged or fails within the delivery timeout; close waits
        // at most drainS for it, then aborts the rest (counted as failures).
        Thread closer = new Thread(() -> producer.close(java.time.Duration.ofSeconds(drainS)), "closer");
        closer.start();
        closer.join((drainS + 30) * 1000L);
        flushFailures(failures, true);
        StringBuilder out = new StringBuilder("[");
        for (int i = 0; i < partitions; i++) {
            if (i > 0) out.append(',');
            out.append(sent.get(i) - acked.get(i) - failed.get(i));
        }
        out.append(']');
        emit("{\"ev\":\"end\",\"t\":" + System.currentTimeMillis() + ",\"sent\":" + arr(sent) + ",\"acked\":"
            + arr(acked) + ",\"failed\":" + arr(failed) + ",\"outstanding\":" + out + "}");
        System.exit(0);
    }

    static void flushFailures(IdentityHashMap<RuntimeException, Failed> failures, boolean all) {
        List<Failed> done = new ArrayList<>();
        long now = System.currentTimeMillis();
        synchronized (failures) {
            for (Failed f : failures.values()) {
                if (all || now - f.lastReported > 300) done.add(f);
            }
            for (Failed f : done) failures.remove(f.e);
        }
        for (Failed f : done) {
            Throwable cause = f.e.getCause();
            emit("{\"ev\":\"fail\",\"t\":" + f.firstReported + ",\"partition\":" + f.partition + ",\"records\":"
                + f.records + ",\"created_ms\":" + f.firstCreated + ",\"last_created_ms\":" + f.lastCreated
                + ",\"exception\":" + q(f.e.getClass().getName()) + ",\"message\":" + q(f.e.getMessage())
                + (cause == null ? "" : ",\"cause\":" + q(cause.getClass().getName() + ": " + cause.getMessage()))
                + "}");
        }
    }
}
