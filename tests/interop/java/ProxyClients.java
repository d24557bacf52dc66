// The Kafka Java producer, consumer and Admin client, driven by the proxy interop tests
// (tests/interop/test_proxy_clients.py). Every command prints exactly one JSON object on
// stdout when it finishes; diagnostics go to stderr. Exit status 0 = the command ran to its
// end, 2 = it failed (the JSON then has an "error" member), 1 = usage error.
//
// Common options: --bootstrap HOST:PORT[,...]  --prop key=value (repeatable)  --timeout-ms N
//
//   produce --topic T --count N --prefix P [--idempotent] [--interval-ms MS]
//           [--until-file F] [--progress-file F] [--transactional-id ID --txn-plan commit=A,abort=B,...]
//       Values P-0, P-1, ... . With --until-file, keeps producing (N is then a minimum) until F
//       exists. --progress-file is rewritten with the acknowledged count as acks arrive.
//       {"acked":[...],"failed":[{"value":V,"error":E}],"aborted":[...]}
//   consume --topic T --group G [--count N] [--max-records M] [--expect-file F] [--drain-ms D]
//           [--protocol classic|consumer] [--read-committed]
//       --count: consume until N records, then poll D ms more for extras.
//       --max-records: process exactly M records, commit exactly those offsets, close.
//       --expect-file: consume until every value listed in F (one per line, F may appear late)
//       has been seen.
//       {"records":[{"partition":P,"offset":O,"value":V}],"committed":{partition:offset}}
//   rebalance --topic T --group G --count N [--protocol classic|consumer]
//       Consumer A starts; after it has processed N/3 records it pauses and consumer B joins
//       the same group. A resumes once the group has rebalanced. Both commit synchronously
//       after every batch and on revocation, so the union is exactly the N records.
//       {"a":[values],"b":[values],"a_assignments":[[p...]...],"b_assignments":[[p...]...]}
//   admin [--create NAME:PARTITIONS:RF[:key=value,...]]... [--config key=value]... [--describe-topic NAME]...
//       Creates topics (--config applies to every created topic), then describeCluster,
//       describeFeatures and describeTopics of the created and named topics.
//       {"created":{name:"ok"|error},"cluster":{...},"features":{...},"topics":{...}}

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.SupportedVersionRange;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ProxyClients {

    // ------------------------------------------------------------------ arguments

    static final class Args {
        final Map<String, List<String>> opts = new HashMap<>();
        final Set<String> flags = new HashSet<>();
        String command;

        static final Set<String> FLAG_NAMES = Set.of("--idempotent", "--read-committed");

        Args(String[] argv) {
            for (int i = 0; i < argv.length; i++) {
                String a = argv[i];
                if (FLAG_NAMES.contains(a)) {
                    flags.add(a);
                } else if (a.startsWith("--")) {
                    if (i + 1 >= argv.length) usage("missing value for " + a);
                    opts.computeIfAbsent(a, k -> new ArrayList<>()).add(argv[++i]);
                } else if (command == null) {
                    command = a;
                } else {
                    usage("unexpected argument " + a);
                }
            }
            if (command == null) usage("no command");
        }

        String get(String name, String dflt) {
            List<String> v = opts.get(name);
            return v == null ? dflt : v.get(v.size() - 1);
        }

        String need(String name) {
            String v = get(name, null);
            if (v == null) usage(command + " needs " + name);
            return v;
        }

        int getInt(String name, int dflt) {
            return Integer.parseInt(get(name, Integer.toString(dflt)));
        }

        List<String> all(String name) {
            return opts.getOrDefault(name, List.of());
        }

        boolean flag(String name) {
            return flags.contains(name);
        }
    }

    static void usage(String msg) {
        System.err.println("ProxyClients: " + msg);
        System.exit(1);
    }

    // ------------------------------------------------------------------ JSON output

    static String json(Object o) {
        StringBuilder sb = new StringBuilder();
        writeJson(sb, o);
        return sb.toString();
    }

    @SuppressWarnings("unchecked")
    static void writeJson(StringBuilder sb, Object o) {
        if (o == null) {
            sb.append("null");
        } else if (o instanceof String) {
            String s = (String) o;
            sb.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                switch (c) {
                    case '"': sb.append("\\\""); break;
                    case '\\': sb.append("\\\\"); break;
                    case '\n': sb.append("\\n"); break;
                    case '\r': sb.append("\\r"); break;
                    case '\t': sb.append("\\t"); break;
                    default:
                        if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
                        else sb.append(c);
                }
            }
            sb.append('"');
        } else if (o instanceof Number || o instanceof Boolean) {
            sb.append(o);
        } else if (o instanceof Map) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<Object, Object> e : ((Map<Object, Object>) o).entrySet()) {
                if (!first) sb.append(',');
                first = false;
                writeJson(sb, String.valueOf(e.getKey()));
                sb.append(':');
                writeJson(sb, e.getValue());
            }
            sb.append('}');
        } else if (o instanceof Collection) {
            sb.append('[');
            boolean first = true;
            for (Object e : (Collection<Object>) o) {
                if (!first) sb.append(',');
                first = false;
                writeJson(sb, e);
            }
            sb.append(']');
        } else {
            writeJson(sb, o.toString());
        }
    }

    static String describe(Throwable t) {
        Throwable c = t;
        while ((c instanceof ExecutionException || c instanceof org.apache.kafka.common.KafkaException
                && c.getCause() != null && c.getClass() == org.apache.kafka.common.KafkaException.class)
                && c.getCause() != null) {
            c = c.getCause();
        }
        return c.getClass().getSimpleName() + ": " + c.getMessage();
    }

    static String nodeAddr(Node n) {
        return n.host() + ":" + n.port();
    }

    // ------------------------------------------------------------------ main

    static Properties common;
    static long deadline;
    // What the program is doing, for the watchdog's report.
    static volatile String stage = "start";
    static final AtomicInteger progressCount = new AtomicInteger();

    static void stage(String s) {
        stage = s;
    }

    public static void main(String[] argv) throws Exception {
        Args args = new Args(argv);
        common = new Properties();
        common.put("bootstrap.servers", args.need("--bootstrap"));
        for (String kv : args.all("--prop")) {
            int eq = kv.indexOf('=');
            if (eq < 1) usage("--prop needs key=value: " + kv);
            common.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        long timeoutMs = args.getInt("--timeout-ms", 60_000);
        deadline = System.currentTimeMillis() + timeoutMs;

        // Client calls such as KafkaProducer.flush() have no timeout of their own; past the
        // deadline the watchdog reports where the program was stuck and ends it.
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(timeoutMs);
            } catch (InterruptedException e) {
                return;
            }
            Map<String, Object> err = new LinkedHashMap<>();
            err.put("error", "deadline of " + timeoutMs + " ms exceeded while: " + stage
                    + " (progress " + progressCount.get() + ")");
            System.out.println(json(err));
            System.out.flush();
            for (Map.Entry<Thread, StackTraceElement[]> e : Thread.getAllStackTraces().entrySet()) {
                if (!e.getKey().getName().startsWith("main") && !e.getKey().getName().startsWith("member")) continue;
                System.err.println("--- thread " + e.getKey().getName());
                for (StackTraceElement el : e.getValue()) System.err.println("    at " + el);
            }
            System.err.flush();
            Runtime.getRuntime().halt(3);
        }, "watchdog");
        watchdog.setDaemon(true);
        watchdog.start();

        Map<String, Object> out = new LinkedHashMap<>();
        int rc = 0;
        try {
            switch (args.command) {
                case "produce": produce(args, out); break;
                case "consume": consume(args, out); break;
                case "rebalance": rebalance(args, out); break;
                case "admin": admin(args, out); break;
                default: usage("unknown command " + args.command);
            }
        } catch (Throwable t) {
            t.printStackTrace();
            out.put("error", describe(t));
            rc = 2;
        }
        System.out.println(json(out));
        System.out.flush();
        // Client threads are daemon-less; leave without waiting for them.
        Runtime.getRuntime().halt(rc);
    }

    // A topic created a moment ago may not be in every broker's metadata cache yet; the
    // broker that answers then says UNKNOWN_TOPIC_OR_PARTITION, directly or through kshim.
    static Map<String, TopicDescription> describeWhenKnown(Admin admin, List<String> names) throws Exception {
        while (true) {
            try {
                return admin.describeTopics(names).allTopicNames().get(remaining(), TimeUnit.MILLISECONDS);
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof org.apache.kafka.common.errors.UnknownTopicOrPartitionException)
                        || remaining() < 1_000) {
                    throw e;
                }
                Thread.sleep(200);
            }
        }
    }

    static long remaining() {
        long r = deadline - System.currentTimeMillis();
        if (r <= 0) throw new RuntimeException("deadline exceeded");
        return r;
    }

    // ------------------------------------------------------------------ produce

    static void writeProgress(Path file, int n) {
        if (file == null) return;
        try {
            Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
            Files.writeString(tmp, Integer.toString(n));
            Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        } catch (Exception e) {
            System.err.println("progress file: " + e);
        }
    }

    static void produce(Args args, Map<String, Object> out) throws Exception {
        String topic = args.need("--topic");
        int count = args.getInt("--count", 100);
        String prefix = args.need("--prefix");
        int intervalMs = args.getInt("--interval-ms", 0);
        String untilFile = args.get("--until-file", null);
        String progress = args.get("--progress-file", null);
        Path progressPath = progress == null ? null : Path.of(progress);
        String txnId = args.get("--transactional-id", null);

        Properties p = new Properties();
        p.putAll(common);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.putIfAbsent(ProducerConfig.ACKS_CONFIG, "all");
        if (args.flag("--idempotent") || txnId != null) {
            p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        } else {
            p.putIfAbsent(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
        }
        if (txnId != null) p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);

        List<String> acked = Collections.synchronizedList(new ArrayList<>());
        List<Map<String, Object>> failed = Collections.synchronizedList(new ArrayList<>());
        List<String> aborted = new ArrayList<>();
        AtomicInteger ackedCount = new AtomicInteger();
        writeProgress(progressPath, 0);

        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            if (txnId != null) {
                stage("initTransactions");
                producer.initTransactions();
                int i = 0;
                for (String step : args.need("--txn-plan").split(",")) {
                    String[] kv = step.split("=");
                    boolean commit = kv[0].equals("commit");
                    if (!commit && !kv[0].equals("abort")) usage("bad --txn-plan step " + step);
                    int n = Integer.parseInt(kv[1]);
                    stage("transaction " + step);
                    producer.beginTransaction();
                    List<String> batch = new ArrayList<>();
                    for (int k = 0; k < n; k++, i++) {
                        String v = prefix + "-" + i;
                        batch.add(v);
                        producer.send(new ProducerRecord<>(topic, v, v));
                    }
                    producer.flush();
                    stage((commit ? "commitTransaction " : "abortTransaction ") + step);
                    if (commit) {
                        producer.commitTransaction();
                        acked.addAll(batch);
                    } else {
                        producer.abortTransaction();
                        aborted.addAll(batch);
                    }
                }
            } else {
                stage("send");
                for (int i = 0; ; i++) {
                    if (i >= count && (untilFile == null || Files.exists(Path.of(untilFile)))) break;
                    remaining();
                    String v = prefix + "-" + i;
                    producer.send(new ProducerRecord<>(topic, v, v), (md, err) -> {
                        if (err == null) {
                            acked.add(v);
                            int n = ackedCount.incrementAndGet();
                            progressCount.set(n);
                            if (progressPath != null && (n % 10 == 0)) writeProgress(progressPath, n);
                        } else {
                            Map<String, Object> f = new LinkedHashMap<>();
                            f.put("value", v);
                            f.put("error", describe(err));
                            failed.add(f);
                        }
                    });
                    if (intervalMs > 0) Thread.sleep(intervalMs);
                }
                stage("flush");
                producer.flush();
            }
            stage("close producer");
            writeProgress(progressPath, ackedCount.get());
            producer.close(Duration.ofMillis(Math.min(remaining(), 30_000)));
        }
        synchronized (acked) {
            out.put("acked", new ArrayList<>(acked));
        }
        synchronized (failed) {
            out.put("failed", new ArrayList<>(failed));
        }
        out.put("aborted", aborted);
    }

    // ------------------------------------------------------------------ consume

    static Properties consumerProps(Args args, String group) {
        Properties p = new Properties();
        p.putAll(common);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, args.get("--protocol", "classic"));
        if (args.flag("--read-committed")) p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        return p;
    }

    static Map<String, Object> rec(ConsumerRecord<String, String> r) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("partition", r.partition());
        m.put("offset", r.offset());
        m.put("value", r.value());
        return m;
    }

    static Set<String> readExpect(Path f) {
        try {
            if (!Files.exists(f)) return null;
            Set<String> s = new HashSet<>();
            for (String line : Files.readAllLines(f, StandardCharsets.UTF_8)) {
                if (!line.isEmpty()) s.add(line);
            }
            return s;
        } catch (Exception e) {
            return null;
        }
    }

    static void consume(Args args, Map<String, Object> out) throws Exception {
        String topic = args.need("--topic");
        String group = args.need("--group");
        int count = args.getInt("--count", -1);
        int maxRecords = args.getInt("--max-records", -1);
        int drainMs = args.getInt("--drain-ms", 2000);
        String expectFile = args.get("--expect-file", null);
        if ((count < 0 ? 0 : 1) + (maxRecords < 0 ? 0 : 1) + (expectFile == null ? 0 : 1) != 1) {
            usage("consume needs exactly one of --count, --max-records, --expect-file");
        }

        List<Map<String, Object>> got = new ArrayList<>();
        Set<String> seen = new HashSet<>();
        Map<Integer, Long> committed = new TreeMap<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProps(args, group))) {
            stage("subscribe and poll");
            consumer.subscribe(List.of(topic));
            long drainUntil = -1;
            Set<String> expect = null;
            Map<TopicPartition, OffsetAndMetadata> toCommit = new HashMap<>();
            outer:
            while (true) {
                remaining();
                if (drainUntil > 0 && System.currentTimeMillis() > drainUntil) break;
                ConsumerRecords<String, String> recs = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<String, String> r : recs) {
                    if (maxRecords >= 0 && got.size() >= maxRecords) break;
                    got.add(rec(r));
                    progressCount.set(got.size());
                    seen.add(r.value());
                    toCommit.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                if (maxRecords >= 0) {
                    if (got.size() >= maxRecords) break outer;
                    continue;
                }
                if (drainUntil < 0) {
                    if (count >= 0 && got.size() >= count) {
                        drainUntil = System.currentTimeMillis() + drainMs;
                    } else if (expectFile != null) {
                        if (expect == null) expect = readExpect(Path.of(expectFile));
                        if (expect != null && seen.containsAll(expect)) {
                            drainUntil = System.currentTimeMillis() + drainMs;
                        }
                    }
                }
            }
            stage("commitSync");
            if (!toCommit.isEmpty()) {
                consumer.commitSync(toCommit, Duration.ofMillis(Math.min(remaining(), 30_000)));
                for (Map.Entry<TopicPartition, OffsetAndMetadata> e : toCommit.entrySet()) {
                    committed.put(e.getKey().partition(), e.getValue().offset());
                }
            }
            stage("close consumer");
            consumer.close(Duration.ofMillis(Math.min(remaining(), 20_000)));
        }
        out.put("records", got);
        out.put("committed", committed);
    }

    // ------------------------------------------------------------------ rebalance

    static final class Member implements Runnable, ConsumerRebalanceListener {
        final String name;
        final Properties props;
        final String topic;
        final List<String> values = Collections.synchronizedList(new ArrayList<>());
        final List<List<Integer>> assignments = Collections.synchronizedList(new ArrayList<>());
        // Counts assignment changes (revocations and assignments) seen by this member.
        final AtomicInteger rebalances = new AtomicInteger();
        final AtomicBoolean stop = new AtomicBoolean();
        final AtomicReference<Throwable> error = new AtomicReference<>();
        volatile boolean pauseRequested;
        volatile boolean paused;
        volatile int resumeAfterRebalances = -1;
        volatile Set<Integer> current = Set.of();
        KafkaConsumer<String, String> consumer;

        Member(String name, Properties props, String topic) {
            this.name = name;
            this.props = props;
            this.topic = topic;
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> parts) {
            // Everything returned by poll() so far has been processed; commit it before the
            // partitions move so that the other member starts exactly after it.
            if (!parts.isEmpty()) consumer.commitSync(Duration.ofSeconds(20));
            Set<Integer> now = new HashSet<>(current);
            for (TopicPartition tp : parts) now.remove(tp.partition());
            record(now);
        }

        private void record(Set<Integer> now) {
            current = now;
            List<Integer> sorted = new ArrayList<>(now);
            Collections.sort(sorted);
            assignments.add(sorted);
            rebalances.incrementAndGet();
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> parts) {
            Set<Integer> now = new HashSet<>();
            for (TopicPartition tp : consumer.assignment()) now.add(tp.partition());
            record(now);
        }

        @Override
        public void run() {
            try {
                consumer = new KafkaConsumer<>(props);
                consumer.subscribe(List.of(topic), this);
                while (!stop.get()) {
                    if (pauseRequested && !paused) {
                        consumer.pause(consumer.assignment());
                        paused = true;
                    }
                    if (paused && resumeAfterRebalances >= 0 && rebalances.get() > resumeAfterRebalances) {
                        consumer.resume(consumer.paused());
                        paused = false;
                        pauseRequested = false;
                    }
                    ConsumerRecords<String, String> recs = consumer.poll(Duration.ofMillis(200));
                    if (paused && !recs.isEmpty()) {
                        // Partitions assigned while paused come unpaused; keep them as received.
                        consumer.pause(consumer.assignment());
                    }
                    for (ConsumerRecord<String, String> r : recs) values.add(r.value());
                    progressCount.addAndGet(recs.count());
                    if (!recs.isEmpty()) consumer.commitSync(Duration.ofSeconds(20));
                }
                consumer.close(Duration.ofSeconds(20));
            } catch (Throwable t) {
                error.set(t);
                t.printStackTrace();
            }
        }
    }

    static void rebalance(Args args, Map<String, Object> out) throws Exception {
        String topic = args.need("--topic");
        String group = args.need("--group");
        int count = args.getInt("--count", 300);
        int drainMs = args.getInt("--drain-ms", 2000);

        Properties pa = consumerProps(args, group);
        pa.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10");
        pa.put(ConsumerConfig.CLIENT_ID_CONFIG, "member-a");
        Properties pb = consumerProps(args, group);
        pb.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10");
        pb.put(ConsumerConfig.CLIENT_ID_CONFIG, "member-b");
        Member a = new Member("a", pa, topic);
        Member b = new Member("b", pb, topic);
        Thread ta = new Thread(a, "member-a");
        Thread tb = new Thread(b, "member-b");
        ta.setDaemon(true);
        tb.setDaemon(true);
        ta.start();
        try {
            stage("member a consuming the first third");
            while (a.values.size() < count / 3) {
                remaining();
                if (a.error.get() != null) throw new RuntimeException("member a failed", a.error.get());
                Thread.sleep(20);
            }
            // A holds the rest of the records while B joins; it resumes after the rebalance
            // that follows B's arrival, so B is certain to get partitions and records.
            a.resumeAfterRebalances = Integer.MAX_VALUE;
            a.pauseRequested = true;
            while (!a.paused) {
                remaining();
                Thread.sleep(10);
            }
            stage("member b joining");
            int before = a.rebalances.get();
            out.put("a_before_join", a.values.size());
            tb.start();
            while (b.current.isEmpty() || a.rebalances.get() == before) {
                remaining();
                if (a.error.get() != null) throw new RuntimeException("member a failed", a.error.get());
                if (b.error.get() != null) throw new RuntimeException("member b failed", b.error.get());
                Thread.sleep(20);
            }
            a.resumeAfterRebalances = before;
            stage("both members consuming");
            long drainUntil = -1;
            while (true) {
                remaining();
                if (a.error.get() != null) throw new RuntimeException("member a failed", a.error.get());
                if (b.error.get() != null) throw new RuntimeException("member b failed", b.error.get());
                if (drainUntil < 0 && a.values.size() + b.values.size() >= count) {
                    drainUntil = System.currentTimeMillis() + drainMs;
                }
                if (drainUntil > 0 && System.currentTimeMillis() > drainUntil) break;
                Thread.sleep(20);
            }
        } finally {
            a.stop.set(true);
            b.stop.set(true);
            ta.join(30_000);
            tb.join(30_000);
            synchronized (a.values) {
                out.put("a", new ArrayList<>(a.values));
            }
            synchronized (b.values) {
                out.put("b", new ArrayList<>(b.values));
            }
            out.put("a_assignments", new ArrayList<>(a.assignments));
            out.put("b_assignments", new ArrayList<>(b.assignments));
        }
    }

    // ------------------------------------------------------------------ admin

    static void admin(Args args, Map<String, Object> out) throws Exception {
        Properties p = new Properties();
        p.putAll(common);
        p.putIfAbsent(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
        p.putIfAbsent(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        Map<String, String> configs = new HashMap<>();
        for (String kv : args.all("--config")) {
            int eq = kv.indexOf('=');
            configs.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        stage("admin");
        try (Admin admin = Admin.create(p)) {
            List<NewTopic> topics = new ArrayList<>();
            List<String> describeNames = new ArrayList<>(args.all("--describe-topic"));
            for (String spec : args.all("--create")) {
                String[] parts = spec.split(":", 4);
                NewTopic t = new NewTopic(parts[0], Integer.parseInt(parts[1]), Short.parseShort(parts[2]));
                Map<String, String> c = new HashMap<>(configs);
                if (parts.length == 4) {
                    for (String kv : parts[3].split(",")) {
                        int eq = kv.indexOf('=');
                        c.put(kv.substring(0, eq), kv.substring(eq + 1));
                    }
                }
                if (!c.isEmpty()) t.configs(c);
                topics.add(t);
                describeNames.add(parts[0]);
            }
            Map<String, Object> created = new LinkedHashMap<>();
            if (!topics.isEmpty()) {
                Map<String, org.apache.kafka.common.KafkaFuture<Void>> fs = admin.createTopics(topics).values();
                for (NewTopic t : topics) {
                    try {
                        fs.get(t.name()).get(remaining(), TimeUnit.MILLISECONDS);
                        created.put(t.name(), "ok");
                    } catch (ExecutionException e) {
                        created.put(t.name(), describe(e));
                    }
                }
            }
            out.put("created", created);

            DescribeClusterResult dc = admin.describeCluster();
            Map<String, Object> cluster = new LinkedHashMap<>();
            cluster.put("cluster_id", dc.clusterId().get(remaining(), TimeUnit.MILLISECONDS));
            Node controller = dc.controller().get(remaining(), TimeUnit.MILLISECONDS);
            cluster.put("controller", controller == null ? null : Map.of("id", controller.id(), "address", nodeAddr(controller)));
            List<Map<String, Object>> nodes = new ArrayList<>();
            for (Node n : dc.nodes().get(remaining(), TimeUnit.MILLISECONDS)) {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("id", n.id());
                m.put("host", n.host());
                m.put("port", n.port());
                nodes.add(m);
            }
            nodes.sort((x, y) -> Integer.compare((Integer) x.get("id"), (Integer) y.get("id")));
            cluster.put("nodes", nodes);
            out.put("cluster", cluster);

            FeatureMetadata fm = admin.describeFeatures().featureMetadata().get(remaining(), TimeUnit.MILLISECONDS);
            Map<String, Object> features = new LinkedHashMap<>();
            Map<String, Object> fin = new TreeMap<>();
            for (Map.Entry<String, FinalizedVersionRange> e : fm.finalizedFeatures().entrySet()) {
                fin.put(e.getKey(), Map.of("min", e.getValue().minVersionLevel(), "max", e.getValue().maxVersionLevel()));
            }
            Map<String, Object> sup = new TreeMap<>();
            for (Map.Entry<String, SupportedVersionRange> e : fm.supportedFeatures().entrySet()) {
                sup.put(e.getKey(), Map.of("min", e.getValue().minVersion(), "max", e.getValue().maxVersion()));
            }
            features.put("finalized", fin);
            features.put("finalized_epoch", fm.finalizedFeaturesEpoch().orElse(null));
            features.put("supported", sup);
            out.put("features", features);

            Map<String, Object> described = new TreeMap<>();
            if (!describeNames.isEmpty()) {
                Map<String, TopicDescription> tds = describeWhenKnown(admin, describeNames);
                for (TopicDescription td : tds.values()) {
                    List<Map<String, Object>> parts = new ArrayList<>();
                    for (TopicPartitionInfo pi : td.partitions()) {
                        Map<String, Object> m = new LinkedHashMap<>();
                        m.put("partition", pi.partition());
                        m.put("leader", pi.leader() == null ? null : nodeAddr(pi.leader()));
                        List<String> replicas = new ArrayList<>();
                        for (Node n : pi.replicas()) replicas.add(nodeAddr(n));
                        m.put("replicas", replicas);
                        List<String> isr = new ArrayList<>();
                        for (Node n : pi.isr()) isr.add(nodeAddr(n));
                        m.put("isr", isr);
                        parts.add(m);
                    }
                    described.put(td.name(), parts);
                }
            }
            out.put("topics", described);
        }
    }
}
