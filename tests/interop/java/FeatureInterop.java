// Drives the Kafka Java Admin client's feature APIs against a broker or kshim, for pytest.
//
// Usage:
//   java -cp 'build/kafka-jars/*' tests/interop/java/FeatureInterop.java --bootstrap HOST:PORT \
//        [--prop key=value]... [--command-config FILE] [--timeout-ms N] COMMAND ...
//
// Commands:
//   describe
//       One JSON line: {"finalized":{name:{"min":A,"max":B}},"finalized_epoch":N|null,
//                       "supported":{name:{"min":A,"max":B}}}
//   update --feature NAME=LEVEL [--type UPGRADE|SAFE_DOWNGRADE|UNSAFE_DOWNGRADE]... [--validate-only]
//       --type applies to the --feature just before it (default UPGRADE); NAME=LEVEL:TYPE also works.
//       One JSON line per feature, in command-line order:
//         {"feature":NAME,"result":"ok"}
//         {"feature":NAME,"result":"error","error":SIMPLE_CLASS_NAME,"message":MESSAGE}
//
// Exit status: 0 when the command ran (even if updates failed), 1 on a usage error,
// 2 when describe failed (one JSON line {"error":...,"message":...} on stdout).
//
// With --serve as the only argument it runs one command per line read from stdin, the
// arguments separated by tabs, in this one JVM (the test suite sends hundreds, and a JVM
// start costs more than the command); after each command's output it prints the line
//   {"__exit__":STATUS}
// and it ends at the end of stdin.

import java.io.BufferedReader;
import java.io.FileInputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeFeaturesOptions;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.FeatureUpdate;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.SupportedVersionRange;
import org.apache.kafka.clients.admin.UpdateFeaturesOptions;
import org.apache.kafka.clients.admin.UpdateFeaturesResult;
import org.apache.kafka.common.KafkaFuture;

public class FeatureInterop {

    private static final class Update {
        final String feature;
        final String level;
        String type = "UPGRADE";

        Update(String feature, String level) {
            this.feature = feature;
            this.level = level;
        }
    }

    /** A usage error: the message goes to stderr with the usage line, and the status is 1. */
    private static final class UsageError extends RuntimeException {
        UsageError(String message) {
            super(message);
        }
    }

    public static void main(String[] argv) throws Exception {
        if (argv.length == 1 && argv[0].equals("--serve")) {
            serve();
            return;
        }
        int rc = runReportingUsage(argv);
        System.out.flush();
        System.exit(rc);
    }

    private static void serve() throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            int rc;
            try {
                rc = runReportingUsage(line.isEmpty() ? new String[0] : line.split("\t", -1));
            } catch (Exception e) {
                System.err.println("FeatureInterop: " + e);
                rc = 3;
            }
            System.out.println("{\"__exit__\":" + rc + "}");
            System.out.flush();
        }
    }

    private static int runReportingUsage(String[] argv) throws Exception {
        try {
            return run(argv);
        } catch (UsageError e) {
            System.err.println("FeatureInterop: " + e.getMessage());
            System.err.println("usage: FeatureInterop --bootstrap HOST:PORT [--prop k=v]... [--command-config FILE]"
                + " [--timeout-ms N] describe | update --feature NAME=LEVEL [--type TYPE]... [--validate-only]");
            return 1;
        }
    }

    private static int run(String[] argv) throws Exception {
        String bootstrap = null;
        Properties props = new Properties();
        int timeoutMs = 30_000;
        String command = null;
        List<Update> updates = new ArrayList<>();
        boolean validateOnly = false;

        for (int i = 0; i < argv.length; i++) {
            String a = argv[i];
            switch (a) {
                case "--bootstrap":
                case "--bootstrap-server":
                    bootstrap = need(argv, ++i, a);
                    break;
                case "--prop": {
                    String kv = need(argv, ++i, a);
                    int eq = kv.indexOf('=');
                    if (eq <= 0) usage("--prop expects key=value, got " + kv);
                    props.setProperty(kv.substring(0, eq), kv.substring(eq + 1));
                    break;
                }
                case "--command-config":
                    try (InputStream in = new FileInputStream(need(argv, ++i, a))) {
                        props.load(in);
                    }
                    break;
                case "--timeout-ms":
                    timeoutMs = Integer.parseInt(need(argv, ++i, a));
                    break;
                case "--feature": {
                    String spec = need(argv, ++i, a);
                    int eq = spec.lastIndexOf('=');
                    if (eq <= 0) usage("--feature expects NAME=LEVEL[:TYPE], got " + spec);
                    String name = spec.substring(0, eq);
                    String level = spec.substring(eq + 1);
                    String type = null;
                    int colon = level.indexOf(':');
                    if (colon >= 0) {
                        type = level.substring(colon + 1);
                        level = level.substring(0, colon);
                    }
                    Update u = new Update(name, level);
                    if (type != null) u.type = type;
                    updates.add(u);
                    break;
                }
                case "--type":
                    if (updates.isEmpty()) usage("--type must follow a --feature");
                    updates.get(updates.size() - 1).type = need(argv, ++i, a);
                    break;
                case "--validate-only":
                    validateOnly = true;
                    break;
                case "describe":
                case "update":
                    if (command != null) usage("only one command may be given");
                    command = a;
                    break;
                default:
                    usage("unknown argument " + a);
            }
        }
        if (bootstrap == null) usage("--bootstrap is required");
        if (command == null) usage("a command (describe, update) is required");

        props.setProperty(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.putIfAbsent(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, String.valueOf(timeoutMs));
        props.putIfAbsent(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(timeoutMs));
        props.putIfAbsent(AdminClientConfig.CLIENT_ID_CONFIG, "kshim-feature-interop");

        int rc;
        try (Admin admin = Admin.create(props)) {
            if (command.equals("describe")) {
                rc = describe(admin, timeoutMs);
            } else {
                if (updates.isEmpty()) usage("update needs at least one --feature");
                rc = update(admin, updates, validateOnly, timeoutMs);
            }
        }
        return rc;
    }

    private static int describe(Admin admin, int timeoutMs) throws InterruptedException {
        FeatureMetadata md;
        try {
            md = admin.describeFeatures(new DescribeFeaturesOptions().timeoutMs(timeoutMs))
                .featureMetadata()
                .get(timeoutMs + 5_000L, TimeUnit.MILLISECONDS);
        } catch (Exception e) {
            Throwable cause = unwrap(e);
            System.out.println("{\"error\":" + q(cause.getClass().getSimpleName())
                + ",\"message\":" + q(String.valueOf(cause.getMessage())) + "}");
            return 2;
        }
        StringBuilder sb = new StringBuilder("{\"finalized\":{");
        boolean first = true;
        for (Map.Entry<String, FinalizedVersionRange> e : new TreeMap<>(md.finalizedFeatures()).entrySet()) {
            if (!first) sb.append(',');
            first = false;
            sb.append(q(e.getKey())).append(":{\"min\":").append(e.getValue().minVersionLevel())
                .append(",\"max\":").append(e.getValue().maxVersionLevel()).append('}');
        }
        sb.append("},\"finalized_epoch\":");
        Optional<Long> epoch = md.finalizedFeaturesEpoch();
        sb.append(epoch.isPresent() ? String.valueOf(epoch.get()) : "null");
        sb.append(",\"supported\":{");
        first = true;
        for (Map.Entry<String, SupportedVersionRange> e : new TreeMap<>(md.supportedFeatures()).entrySet()) {
            if (!first) sb.append(',');
            first = false;
            sb.append(q(e.getKey())).append(":{\"min\":").append(e.getValue().minVersion())
                .append(",\"max\":").append(e.getValue().maxVersion()).append('}');
        }
        sb.append("}}");
        System.out.println(sb);
        return 0;
    }

    private static int update(Admin admin, List<Update> updates, boolean validateOnly, int timeoutMs)
            throws InterruptedException {
        Map<String, FeatureUpdate> request = new LinkedHashMap<>();
        Map<String, String> localErrors = new LinkedHashMap<>();
        for (Update u : updates) {
            try {
                short level = Short.parseShort(u.level);
                FeatureUpdate.UpgradeType type = FeatureUpdate.UpgradeType.valueOf(u.type);
                request.put(u.feature, new FeatureUpdate(level, type));
            } catch (RuntimeException e) {
                localErrors.put(u.feature, line(u.feature, e));
            }
        }
        Map<String, KafkaFuture<Void>> futures = Map.of();
        if (!request.isEmpty()) {
            UpdateFeaturesResult result = admin.updateFeatures(
                request, new UpdateFeaturesOptions().validateOnly(validateOnly).timeoutMs(timeoutMs));
            futures = result.values();
        }
        for (Update u : updates) {
            if (localErrors.containsKey(u.feature)) {
                System.out.println(localErrors.get(u.feature));
                continue;
            }
            KafkaFuture<Void> f = futures.get(u.feature);
            if (f == null) {
                System.out.println("{\"feature\":" + q(u.feature) + ",\"result\":\"error\",\"error\":\"NoResult\","
                    + "\"message\":\"the client returned no future for this feature\"}");
                continue;
            }
            try {
                f.get(timeoutMs + 5_000L, TimeUnit.MILLISECONDS);
                System.out.println("{\"feature\":" + q(u.feature) + ",\"result\":\"ok\"}");
            } catch (Exception e) {
                System.out.println(line(u.feature, unwrap(e)));
            }
        }
        return 0;
    }

    private static String line(String feature, Throwable t) {
        return "{\"feature\":" + q(feature) + ",\"result\":\"error\",\"error\":" + q(t.getClass().getSimpleName())
            + ",\"message\":" + q(String.valueOf(t.getMessage())) + "}";
    }

    private static Throwable unwrap(Throwable t) {
        while (t instanceof ExecutionException && t.getCause() != null) {
            t = t.getCause();
        }
        return t;
    }

    private static String q(String s) {
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

    private static String need(String[] argv, int i, String flag) {
        if (i >= argv.length) usage(flag + " needs a value");
        return argv[i];
    }

    private static void usage(String msg) {
        throw new UsageError(msg);
    }
}
