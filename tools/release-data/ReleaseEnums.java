// Prints, as JSON on stdout, what a Kafka release's server-common jar says of
// metadata.version and of every other feature: levels, names, which are
// production-ready, dependencies, and each feature's default level per
// metadata.version (what `kafka-features.sh version-mapping` prints); which API
// versions need a feature level; the broker configs that topic configs override.
//
// Run with the release's kafka-server-common and kafka-clients jars on the
// class path. Reads the enums by reflection, so one source serves every release.

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

public class ReleaseEnums {
    static final String PKG = "org.apache.kafka.server.common.";

    public static void main(String[] args) throws Exception {
        Class<?> mvClass = Class.forName(PKG + "MetadataVersion");
        Object[] versions = mvClass.getEnumConstants();
        Object latestProduction = staticField(mvClass, "LATEST_PRODUCTION");
        Object minimum = staticField(mvClass, "MINIMUM_VERSION");
        StringBuilder out = new StringBuilder("{\n");
        out.append("  \"metadata_versions\": [\n");
        List<String> rows = new ArrayList<>();
        for (Object mv : versions) {
            short level = (Short) call(mv, "featureLevel");
            String name = (String) call(mv, "version");
            boolean production = ((Enum<?>) mv).ordinal() <= ((Enum<?>) latestProduction).ordinal();
            boolean changed = (Boolean) call(mv, "didMetadataChange");
            rows.add(String.format("    {\"level\": %d, \"name\": %s, \"production\": %b, \"metadata_changed\": %b}",
                    level, quote(name), production, changed));
        }
        out.append(String.join(",\n", rows)).append("\n  ],\n");
        out.append("  \"minimum_metadata_version\": ").append(call(minimum, "featureLevel")).append(",\n");
        out.append("  \"latest_production_metadata_version\": ").append(call(latestProduction, "featureLevel")).append(",\n");

        Class<?> featureClass = Class.forName(PKG + "Feature");
        List<String> allNames = new ArrayList<>();
        for (Object f : featureClass.getEnumConstants()) {
            allNames.add(quote((String) call(f, "featureName")));
        }
        out.append("  \"all_feature_names\": [").append(String.join(", ", allNames)).append("],\n");
        List<String> features = new ArrayList<>();
        Object production = staticField(featureClass, "PRODUCTION_FEATURES");
        for (Object f : featureClass.getEnumConstants()) {
            String name = (String) call(f, "featureName");
            // Test features exist for Kafka's own unit tests; no tool shows them.
            if (!((List<?>) production).contains(f)) {
                continue;
            }
            Object[] featureVersions = (Object[]) call(f, "featureVersions");
            List<String> levels = new ArrayList<>();
            for (Object fv : featureVersions) {
                short level = (Short) call(fv, "featureLevel");
                Object bootstrap = call(fv, "bootstrapMetadataVersion");
                @SuppressWarnings("unchecked")
                Map<String, Short> deps = new TreeMap<>((Map<String, Short>) call(fv, "dependencies"));
                List<String> depRows = new ArrayList<>();
                for (Map.Entry<String, Short> d : deps.entrySet()) {
                    depRows.add(quote(d.getKey()) + ": " + d.getValue());
                }
                levels.add(String.format("        {\"level\": %d, \"bootstrap_metadata_version\": %s, \"dependencies\": {%s}}",
                        level, call(bootstrap, "featureLevel"), String.join(", ", depRows)));
            }
            TreeMap<Short, Short> defaults = new TreeMap<>();
            Method defaultLevel = featureClass.getMethod("defaultLevel", mvClass);
            for (Object mv : versions) {
                defaults.put((Short) call(mv, "featureLevel"), (Short) defaultLevel.invoke(f, mv));
            }
            List<String> defaultRows = new ArrayList<>();
            for (Map.Entry<Short, Short> d : defaults.entrySet()) {
                defaultRows.add("\"" + d.getKey() + "\": " + d.getValue());
            }
            features.add(String.format(
                    "    {\"name\": %s, \"minimum_production\": %s, \"latest_production\": %s, \"latest_testing\": %s,\n"
                            + "      \"levels\": [\n%s\n      ],\n      \"default_level_by_metadata_version\": {%s}}",
                    quote(name), call(f, "minimumProduction"),
                    call(f, "latestProduction"), call(f, "latestTesting"),
                    String.join(",\n", levels), String.join(", ", defaultRows)));
        }
        out.append("  \"features\": [\n").append(String.join(",\n", features)).append("\n  ],\n");
        out.append(protocolLevels()).append(",\n");
        out.append(transactionV2Requests()).append(",\n");
        out.append(topicConfigSynonyms()).append("\n}\n");
        System.out.print(out);
    }

    /** Each group protocol's feature, and the lowest level at which the feature's
     *  own predicate says the protocol is supported. A release without the
     *  feature's class leaves the protocol out. */
    static String protocolLevels() throws Exception {
        String[][] protocols = {
            // feature version class, its predicate, the protocol's API name prefix
            {"GroupVersion", "isConsumerRebalanceProtocolSupported", "ConsumerGroup"},
            {"ShareVersion", "supportsShareGroups", "Share"},
            {"StreamsVersion", "streamsGroupSupported", "StreamsGroup"},
        };
        List<String> rows = new ArrayList<>();
        for (String[] p : protocols) {
            Class<?> c;
            try {
                c = Class.forName(PKG + p[0]);
            } catch (ClassNotFoundException e) {
                continue;
            }
            Method predicate = c.getMethod(p[1]);
            Short from = null;
            for (Object fv : c.getEnumConstants()) {
                short level = (Short) call(fv, "featureLevel");
                if ((Boolean) predicate.invoke(fv) && (from == null || level < from)) {
                    from = level;
                }
            }
            if (from != null) {
                rows.add(String.format("    {\"feature\": %s, \"level\": %d, \"api_name_prefix\": %s}",
                        quote((String) staticField(c, "FEATURE_NAME")), from, quote(p[2])));
            }
        }
        return "  \"protocol_levels\": [\n" + String.join(",\n", rows) + "\n  ]";
    }

    /** Requests whose newer versions need transaction.version 2 (KIP-890): the
     *  last version before it, from each request class's own constant. */
    static String transactionV2Requests() throws Exception {
        String[] requests = {"ProduceRequest", "EndTxnRequest", "AddPartitionsToTxnRequest", "TxnOffsetCommitRequest"};
        Class<?> tv = Class.forName(PKG + "TransactionVersion");
        short level = (Short) call(staticField(tv, "TV_2"), "featureLevel");
        List<String> rows = new ArrayList<>();
        for (String name : requests) {
            Class<?> c = Class.forName("org.apache.kafka.common.requests." + name);
            Field last;
            try {
                last = c.getField("LAST_STABLE_VERSION_BEFORE_TRANSACTION_V2");
            } catch (NoSuchFieldException e) {
                continue;
            }
            rows.add(String.format("    {\"request\": %s, \"last_version_before\": %d}",
                    quote(name), (Short) last.get(null)));
        }
        return "  \"transaction_v2\": {\"feature\": \"transaction.version\", \"level\": " + level
                + ", \"requests\": [\n" + String.join(",\n", rows) + "\n  ]}";
    }

    /** Each topic config and the broker config it overrides, where the names differ. */
    @SuppressWarnings("unchecked")
    static String topicConfigSynonyms() throws Exception {
        Class<?> c = Class.forName("org.apache.kafka.server.config.ServerTopicConfigSynonyms");
        Map<String, String> synonyms = new TreeMap<>((Map<String, String>) staticField(c, "TOPIC_CONFIG_SYNONYMS"));
        List<String> rows = new ArrayList<>();
        for (Map.Entry<String, String> e : synonyms.entrySet()) {
            if (!e.getKey().equals(e.getValue())) {
                rows.add("    " + quote(e.getKey()) + ": " + quote(e.getValue()));
            }
        }
        return "  \"topic_config_synonyms\": {\n" + String.join(",\n", rows) + "\n  }";
    }

    static Object staticField(Class<?> c, String name) throws Exception {
        Field f = c.getField(name);
        return f.get(null);
    }

    static Object call(Object target, String method) throws Exception {
        Method m = target.getClass().getMethod(method);
        m.setAccessible(true);
        return m.invoke(target);
    }

    static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }
}
