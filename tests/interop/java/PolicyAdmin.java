// The Kafka Java Admin client (kafka-clients 4.1.1) as a small command-line tool for the policy
// interop tests (tests/interop/test_proxy_policy.py). Every result is one JSON object on its own
// line on stdout; diagnostics go to stderr.
//
// Usage:
//   java -cp 'build/kafka-jars/*:CLASSES' PolicyAdmin [--timeout-ms N] STEP [-- STEP]...
//
// Several steps may be chained with "--" so that one JVM does many operations; each step names
// its own bootstrap, so one run may talk to kshim and to the broker directly. Every output line
// carries "step" (0-based index) and "cmd".
//
// Steps:
//   create BOOTSTRAP [--validate-only] SPEC...
//       SPEC = NAME:PARTITIONS:RF[:key=value,key=value...]; -1 for the broker's default.
//       PARTITIONS may be assign=R/R|R/R... instead: an explicit replica assignment, the broker
//       ids of partition 0, then of partition 1, ... (RF is then ignored).
//       A comma followed by text without "=" continues the previous value, so
//       cleanup.policy=compact,delete is one config. One createTopics call for all SPECs;
//       one line per topic, in order:
//         {"topic":NAME,"ok":true}
//         {"topic":NAME,"ok":false,"error":SIMPLE_CLASS_NAME,"message":MESSAGE}
//   incremental BOOTSTRAP [--validate-only] RESOURCE...
//       RESOURCE = topic:NAME:OPS or broker:ID:OPS; OPS = OP:key[=value][;OP:key[=value]]...
//       with OP one of SET, DELETE, APPEND, SUBTRACT. One incrementalAlterConfigs call for all
//       resources; one line per resource: {"resource":"topic:NAME","ok":...[,"error","message"]}
//   describe-configs BOOTSTRAP RES...
//       RES = topic:NAME or broker:ID. One line per resource with every entry whose source is
//       not DEFAULT_CONFIG: {"resource":..,"ok":true,"configs":{name:{"value":V,"source":S}}}
//   topics BOOTSTRAP
//       {"topics":[names, sorted]} (internal topics left out)
//   features BOOTSTRAP
//       {"finalized":{name:max_level}}
//   update-features BOOTSTRAP [--validate-only] NAME=LEVEL[:UPGRADE|SAFE_DOWNGRADE|UNSAFE_DOWNGRADE]...
//       One updateFeatures call; one line per feature: {"feature":NAME,"ok":...[,"error","message"]}
//
// The legacy Admin.alterConfigs is gone from kafka-clients 4.x, so there is no step for it.
//
// Exit status: 0 = every step ran to its end (whatever the per-item results), 1 = usage error,
// 2 = a step failed as a whole (a line {"fatal":...} says which), 3 = the deadline passed.

import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.AlterConfigsOptions;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.FeatureUpdate;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.UpdateFeaturesOptions;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.config.ConfigResource;

public class PolicyAdmin {

    static long deadline;
    static final Map<String, Admin> admins = new HashMap<>();

    public static void main(String[] argv) {
        List<String> args = new ArrayList<>(List.of(argv));
        long timeoutMs = 90_000;
        if (args.size() >= 2 && args.get(0).equals("--timeout-ms")) {
            timeoutMs = Long.parseLong(args.get(1));
            args = args.subList(2, args.size());
        }
        List<List<String>> steps = new ArrayList<>();
        List<String> cur = new ArrayList<>();
        for (String a : args) {
            if (a.equals("--")) {
                steps.add(cur);
                cur = new ArrayList<>();
            } else {
                cur.add(a);
            }
        }
        steps.add(cur);
        for (List<String> s : steps) {
            if (s.size() < 2) usage("every step needs a command and a bootstrap: " + s);
        }

        deadline = System.currentTimeMillis() + timeoutMs;
        final long limit = timeoutMs;
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(limit);
            } catch (InterruptedException e) {
                return;
            }
            System.out.println("{\"fatal\":" + q("deadline of " + limit + " ms exceeded") + "}");
            System.out.flush();
            Runtime.getRuntime().halt(3);
        }, "watchdog");
        watchdog.setDaemon(true);
        watchdog.start();

        int rc = 0;
        for (int i = 0; i < steps.size() && rc == 0; i++) {
            List<String> s = steps.get(i);
            String cmd = s.get(0);
            String bootstrap = s.get(1);
            List<String> rest = new ArrayList<>(s.subList(2, s.size()));
            boolean validateOnly = rest.remove("--validate-only");
            Step out = new Step(i, cmd);
            try {
                Admin admin = admin(bootstrap);
                switch (cmd) {
                    case "create": create(admin, out, validateOnly, rest); break;
                    case "incremental": incremental(admin, out, validateOnly, rest); break;
                    case "describe-configs": describeConfigs(admin, out, rest); break;
                    case "topics": topics(admin, out); break;
                    case "features": features(admin, out); break;
                    case "update-features": updateFeatures(admin, out, validateOnly, rest); break;
                    case "alter":
                        usage("alter: Admin.alterConfigs does not exist in kafka-clients 4.x");
                        break;
                    default: usage("unknown command " + cmd);
                }
            } catch (IllegalArgumentException e) {
                usage(cmd + ": " + e.getMessage());
            } catch (Throwable t) {
                t.printStackTrace();
                Throwable c = unwrap(t);
                Map<String, Object> m = out.line();
                m.put("fatal", c.getClass().getSimpleName() + ": " + c.getMessage());
                print(m);
                rc = 2;
            }
        }
        System.out.flush();
        // Admin client threads would keep the JVM alive for a while; leave now.
        Runtime.getRuntime().halt(rc);
    }

    static Admin admin(String bootstrap) {
        return admins.computeIfAbsent(bootstrap, b -> {
            Properties p = new Properties();
            p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, b);
            p.put(AdminClientConfig.CLIENT_ID_CONFIG, "kshim-policy-admin");
            p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
            p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
            return Admin.create(p);
        });
    }

    static final class Step {
        final int index;
        final String cmd;

        Step(int index, String cmd) {
            this.index = index;
            this.cmd = cmd;
        }

        Map<String, Object> line() {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("step", index);
            m.put("cmd", cmd);
            return m;
        }
    }

    static long remaining() {
        long r = deadline - System.currentTimeMillis();
        if (r <= 0) throw new RuntimeException("deadline exceeded");
        return r;
    }

    // Waits for one per-item future; fills "ok" and, on failure, "error" and "message".
    static void outcome(KafkaFuture<?> f, Map<String, Object> m) throws Exception {
        if (f == null) {
            m.put("ok", false);
            m.put("error", "NoResult");
            m.put("message", "the client returned no future for this item");
            return;
        }
        try {
            f.get(remaining(), TimeUnit.MILLISECONDS);
            m.put("ok", true);
        } catch (ExecutionException e) {
            Throwable c = unwrap(e);
            m.put("ok", false);
            m.put("error", c.getClass().getSimpleName());
            m.put("message", String.valueOf(c.getMessage()));
        }
    }

    // ------------------------------------------------------------------ create

    static Map<String, String> parseConfigs(String text) {
        Map<String, String> out = new LinkedHashMap<>();
        String last = null;
        for (String piece : text.split(",")) {
            int eq = piece.indexOf('=');
            if (eq < 0) {
                if (last == null) throw new IllegalArgumentException("config without '=': " + piece);
                out.put(last, out.get(last) + "," + piece);
            } else {
                last = piece.substring(0, eq);
                out.put(last, piece.substring(eq + 1));
            }
        }
        return out;
    }

    static void create(Admin admin, Step step, boolean validateOnly, List<String> specs) throws Exception {
        if (specs.isEmpty()) throw new IllegalArgumentException("no topic spec");
        List<NewTopic> topics = new ArrayList<>();
        for (String spec : specs) {
            String[] parts = spec.split(":", 4);
            if (parts.length < 3) throw new IllegalArgumentException("spec is NAME:PARTITIONS:RF[:k=v,...]: " + spec);
            NewTopic t;
            if (parts[1].startsWith("assign=")) {
                // assign=R/R|R/R...: the replicas of partition 0, 1, ...; RF is then ignored.
                Map<Integer, List<Integer>> assignment = new LinkedHashMap<>();
                String[] partitionsSpec = parts[1].substring("assign=".length()).split("\\|");
                for (int p = 0; p < partitionsSpec.length; p++) {
                    List<Integer> replicas = new ArrayList<>();
                    for (String id : partitionsSpec[p].split("/")) replicas.add(Integer.parseInt(id));
                    assignment.put(p, replicas);
                }
                t = new NewTopic(parts[0], assignment);
            } else {
                int partitions = Integer.parseInt(parts[1]);
                short rf = Short.parseShort(parts[2]);
                t = new NewTopic(parts[0],
                    partitions < 0 ? java.util.Optional.empty() : java.util.Optional.of(partitions),
                    rf < 0 ? java.util.Optional.empty() : java.util.Optional.of(rf));
            }
            if (parts.length == 4 && !parts[3].isEmpty()) t.configs(parseConfigs(parts[3]));
            topics.add(t);
        }
        Map<String, KafkaFuture<Void>> fs =
            admin.createTopics(topics, new CreateTopicsOptions().validateOnly(validateOnly)).values();
        for (NewTopic t : topics) {
            Map<String, Object> m = step.line();
            m.put("topic", t.name());
            outcome(fs.get(t.name()), m);
            print(m);
        }
    }

    // ------------------------------------------------------------------ configs

    static ConfigResource resource(String spec) {
        String[] parts = spec.split(":", 3);
        if (parts.length < 2) throw new IllegalArgumentException("resource is topic:NAME or broker:ID: " + spec);
        ConfigResource.Type type;
        switch (parts[0]) {
            case "topic": type = ConfigResource.Type.TOPIC; break;
            case "broker": type = ConfigResource.Type.BROKER; break;
            default: throw new IllegalArgumentException("resource type must be topic or broker: " + spec);
        }
        return new ConfigResource(type, parts[1]);
    }

    static String label(ConfigResource r) {
        return (r.type() == ConfigResource.Type.TOPIC ? "topic:" : "broker:") + r.name();
    }

    static void incremental(Admin admin, Step step, boolean validateOnly, List<String> specs) throws Exception {
        if (specs.isEmpty()) throw new IllegalArgumentException("no resource");
        Map<ConfigResource, Collection<AlterConfigOp>> request = new LinkedHashMap<>();
        for (String spec : specs) {
            String[] parts = spec.split(":", 3);
            if (parts.length < 3) throw new IllegalArgumentException("resource is TYPE:NAME:OP:key[=value]: " + spec);
            ConfigResource r = resource(spec);
            List<AlterConfigOp> ops = new ArrayList<>();
            for (String op : parts[2].split(";")) {
                int colon = op.indexOf(':');
                if (colon < 0) throw new IllegalArgumentException("operation is OP:key[=value]: " + op);
                AlterConfigOp.OpType type = AlterConfigOp.OpType.valueOf(op.substring(0, colon));
                String kv = op.substring(colon + 1);
                int eq = kv.indexOf('=');
                String key = eq < 0 ? kv : kv.substring(0, eq);
                String value = eq < 0 ? null : kv.substring(eq + 1);
                if (value == null && type != AlterConfigOp.OpType.DELETE) {
                    throw new IllegalArgumentException(type + " needs key=value: " + op);
                }
                ops.add(new AlterConfigOp(new ConfigEntry(key, value == null ? "" : value), type));
            }
            if (request.containsKey(r)) throw new IllegalArgumentException("resource given twice: " + spec);
            request.put(r, ops);
        }
        Map<ConfigResource, KafkaFuture<Void>> fs =
            admin.incrementalAlterConfigs(request, new AlterConfigsOptions().validateOnly(validateOnly)).values();
        for (ConfigResource r : request.keySet()) {
            Map<String, Object> m = step.line();
            m.put("resource", label(r));
            outcome(fs.get(r), m);
            print(m);
        }
    }

    static void describeConfigs(Admin admin, Step step, List<String> specs) throws Exception {
        if (specs.isEmpty()) throw new IllegalArgumentException("no resource");
        List<ConfigResource> resources = new ArrayList<>();
        for (String spec : specs) resources.add(resource(spec));
        Map<ConfigResource, KafkaFuture<Config>> fs = admin.describeConfigs(resources).values();
        for (ConfigResource r : resources) {
            Map<String, Object> m = step.line();
            m.put("resource", label(r));
            KafkaFuture<Config> f = fs.get(r);
            try {
                Config config = f.get(remaining(), TimeUnit.MILLISECONDS);
                Map<String, Object> entries = new TreeMap<>();
                for (ConfigEntry e : config.entries()) {
                    if (e.source() == ConfigEntry.ConfigSource.DEFAULT_CONFIG) continue;
                    Map<String, Object> v = new LinkedHashMap<>();
                    v.put("value", e.value());
                    v.put("source", e.source().name());
                    entries.put(e.name(), v);
                }
                m.put("ok", true);
                m.put("configs", entries);
            } catch (ExecutionException e) {
                Throwable c = unwrap(e);
                m.put("ok", false);
                m.put("error", c.getClass().getSimpleName());
                m.put("message", String.valueOf(c.getMessage()));
            }
            print(m);
        }
    }

    // ------------------------------------------------------------------ topics and features

    static void topics(Admin admin, Step step) throws Exception {
        Collection<String> names = admin.listTopics(new ListTopicsOptions().listInternal(false))
            .names().get(remaining(), TimeUnit.MILLISECONDS);
        Map<String, Object> m = step.line();
        m.put("topics", new ArrayList<>(new TreeSet<>(names)));
        print(m);
    }

    static void features(Admin admin, Step step) throws Exception {
        Map<String, FinalizedVersionRange> fin = admin.describeFeatures().featureMetadata()
            .get(remaining(), TimeUnit.MILLISECONDS).finalizedFeatures();
        Map<String, Object> levels = new TreeMap<>();
        for (Map.Entry<String, FinalizedVersionRange> e : fin.entrySet()) {
            levels.put(e.getKey(), (int) e.getValue().maxVersionLevel());
        }
        Map<String, Object> m = step.line();
        m.put("finalized", levels);
        print(m);
    }

    static void updateFeatures(Admin admin, Step step, boolean validateOnly, List<String> specs) throws Exception {
        if (specs.isEmpty()) throw new IllegalArgumentException("no feature");
        Map<String, FeatureUpdate> request = new LinkedHashMap<>();
        for (String spec : specs) {
            int eq = spec.lastIndexOf('=');
            if (eq <= 0) throw new IllegalArgumentException("feature is NAME=LEVEL[:TYPE]: " + spec);
            String level = spec.substring(eq + 1);
            String type = "UPGRADE";
            int colon = level.indexOf(':');
            if (colon >= 0) {
                type = level.substring(colon + 1);
                level = level.substring(0, colon);
            }
            request.put(spec.substring(0, eq),
                new FeatureUpdate(Short.parseShort(level), FeatureUpdate.UpgradeType.valueOf(type)));
        }
        Map<String, KafkaFuture<Void>> fs = admin.updateFeatures(
            request, new UpdateFeaturesOptions().validateOnly(validateOnly)).values();
        for (String name : request.keySet()) {
            Map<String, Object> m = step.line();
            m.put("feature", name);
            outcome(fs.get(name), m);
            print(m);
        }
    }

    // ------------------------------------------------------------------ output

    static Throwable unwrap(Throwable t) {
        while (t instanceof ExecutionException && t.getCause() != null) t = t.getCause();
        return t;
    }

    static void print(Map<String, Object> m) {
        StringBuilder sb = new StringBuilder();
        writeJson(sb, m);
        System.out.println(sb);
        System.out.flush();
    }

    @SuppressWarnings("unchecked")
    static void writeJson(StringBuilder sb, Object o) {
        if (o == null) {
            sb.append("null");
        } else if (o instanceof String) {
            sb.append(q((String) o));
        } else if (o instanceof Number || o instanceof Boolean) {
            sb.append(o);
        } else if (o instanceof Map) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<Object, Object> e : ((Map<Object, Object>) o).entrySet()) {
                if (!first) sb.append(',');
                first = false;
                sb.append(q(String.valueOf(e.getKey()))).append(':');
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
            sb.append(q(o.toString()));
        }
    }

    static String q(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
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
        return sb.append('"').toString();
    }

    static void usage(String msg) {
        System.err.println("PolicyAdmin: " + msg);
        System.err.println("usage: PolicyAdmin [--timeout-ms N] STEP [-- STEP]...; see the header of PolicyAdmin.java");
        System.out.flush();
        Runtime.getRuntime().halt(1);
    }
}
