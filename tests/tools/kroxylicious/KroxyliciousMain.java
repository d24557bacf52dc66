// Starts Kroxylicious from its runtime library (io.kroxylicious:kroxylicious-runtime), for the
// kroxylicious leg of the forwarding benchmark (tests/tools/proxy_bench.py, which resolves the
// runtime with pom.xml beside this file, compiles this against it and runs
// `java -Xmx512m -cp CLASSES:LIBS/* KroxyliciousMain CONFIG.yaml`).
//
// What kroxylicious-app's own main (io.kroxylicious.app.Kroxylicious) does, without picocli, its
// banner or log4j2: parse the YAML configuration with ConfigParser, build a KafkaProxy with the
// default features, start it and block. The app leaves the JVM to end on SIGTERM; here a
// shutdown hook stops the proxy first (its listeners unbound, Netty's event loops shut down), so
// that SIGTERM ends it cleanly. The first line on stdout names the Kroxylicious version that was
// loaded (from the runtime jar itself), the driver reports it.
//
// Logging: slf4j-simple to stderr, at the levels of the app's log4j2.yaml: WARN, and INFO for
// io.kroxylicious (org.slf4j.simpleLogger.* system properties override these).

import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Properties;
import java.util.jar.JarFile;
import java.util.zip.ZipEntry;

import io.kroxylicious.proxy.KafkaProxy;
import io.kroxylicious.proxy.config.ConfigParser;
import io.kroxylicious.proxy.config.Configuration;
import io.kroxylicious.proxy.internal.config.Features;

public final class KroxyliciousMain {

    private static final String POM_PROPERTIES = "META-INF/maven/io.kroxylicious/kroxylicious-runtime/pom.properties";

    private KroxyliciousMain() {
    }

    public static void main(String[] args) throws Exception {
        // Before any logger exists (KafkaProxy and ConfigParser make theirs when first used).
        setDefault("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        setDefault("org.slf4j.simpleLogger.log.io.kroxylicious", "info");
        setDefault("org.slf4j.simpleLogger.showDateTime", "true");
        setDefault("org.slf4j.simpleLogger.dateTimeFormat", "yyyy-MM-dd HH:mm:ss.SSS");

        if (args.length != 1) {
            System.err.println("usage: java -cp CLASSES:KROXYLICIOUS_LIBS/* KroxyliciousMain CONFIG.yaml");
            System.exit(2);
        }
        Path configFile = Path.of(args[0]);
        if (!Files.isRegularFile(configFile)) {
            System.err.println("KroxyliciousMain: no configuration file at " + configFile.toAbsolutePath());
            System.exit(2);
        }

        System.out.println("KroxyliciousMain: kroxylicious-runtime " + runtimeVersion() + " on Java "
                + Runtime.version() + " (" + System.getProperty("java.vendor") + ")");
        System.out.flush();

        ConfigParser parser = new ConfigParser();
        Configuration config;
        try (InputStream in = Files.newInputStream(configFile)) {
            config = parser.parseConfiguration(in);
        }
        KafkaProxy proxy = new KafkaProxy(parser, config, Features.defaultFeatures());
        // startup() binds every gateway and returns; on failure it has shut itself down and throws.
        proxy.startup();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                proxy.shutdown();
            }
            catch (IllegalStateException alreadyStopped) {
                // not running any more: nothing to stop
            }
        }, "kroxylicious-main-shutdown"));
        System.out.println("KroxyliciousMain: started");
        System.out.flush();
        proxy.block();
    }

    private static void setDefault(String key, String value) {
        if (System.getProperty(key) == null) {
            System.setProperty(key, value);
        }
    }

    /** The version (and commit) recorded in the jar KafkaProxy was loaded from. */
    private static String runtimeVersion() {
        String where = "?";
        try {
            var source = KafkaProxy.class.getProtectionDomain().getCodeSource();
            Path jar = Path.of(source.getLocation().toURI());
            where = jar.toString();
            try (JarFile jf = new JarFile(jar.toFile())) {
                Properties pom = load(jf, POM_PROPERTIES);
                Properties git = load(jf, "git.properties");
                String version = pom.getProperty("version", "unknown");
                String commit = git.getProperty("git.commit.id.abbrev");
                return version + (commit == null ? "" : " (commit " + commit + ")") + " from " + where;
            }
        }
        catch (Exception e) {
            return "unknown (" + e + ") from " + where;
        }
    }

    private static Properties load(JarFile jar, String name) throws java.io.IOException {
        Properties p = new Properties();
        ZipEntry entry = jar.getEntry(name);
        if (entry != null) {
            try (InputStream in = jar.getInputStream(entry)) {
                p.load(in);
            }
        }
        return p;
    }
}
