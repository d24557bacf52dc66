import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;

/**
 * Prints the API versions that the brokers of one Apache Kafka release serve,
 * read from that release's kafka-clients jar (put it on the classpath).
 *
 * One line per API key a broker serves, sorted by key: {@code api_key min max}, where
 * min is the oldest version the release parses ({@code ApiKeys.oldestVersion()}) and
 * max the latest stable version ({@code ApiKeys.latestVersion(false)} where that
 * exists, i.e. without versions marked latestVersionUnstable, which a broker only
 * serves with unstable.api.versions.enable=true). An API is served by a broker when
 * it is in scope for ApiMessageType.ListenerType.BROKER (KRaft broker) or, where
 * that enum constant exists (3.x), ZK_BROKER. APIs with no stable version are left out.
 *
 * Compiled without kafka-clients on the classpath: everything goes through
 * reflection, because ApiKeys changed between 3.0 and 4.1.
 *
 * Usage: java -cp .:kafka-clients-X.Y.Z.jar ReleaseApis
 */
public class ReleaseApis {
    public static void main(String[] args) throws Exception {
        Class<?> apiKeys = Class.forName("org.apache.kafka.common.protocol.ApiKeys");
        Class<?> listenerType =
                Class.forName("org.apache.kafka.common.message.ApiMessageType$ListenerType");

        List<Object> brokerListeners = new ArrayList<>();
        for (Object lt : listenerType.getEnumConstants()) {
            String name = ((Enum<?>) lt).name();
            if (name.equals("BROKER") || name.equals("ZK_BROKER")) {
                brokerListeners.add(lt);
            }
        }
        if (brokerListeners.isEmpty()) {
            throw new IllegalStateException("no BROKER or ZK_BROKER listener type");
        }

        Method inScope = apiKeys.getMethod("inScope", listenerType);
        Method oldestVersion = apiKeys.getMethod("oldestVersion");
        Method latestStable = null;
        try {
            latestStable = apiKeys.getMethod("latestVersion", boolean.class);
        } catch (NoSuchMethodException e) {
            // Before 3.5 there is no notion of unstable versions: latestVersion() is stable.
        }
        Method latestVersion = apiKeys.getMethod("latestVersion");

        List<short[]> rows = new ArrayList<>();
        for (Object key : apiKeys.getEnumConstants()) {
            boolean served = false;
            for (Object lt : brokerListeners) {
                served |= (Boolean) inScope.invoke(key, lt);
            }
            if (!served) {
                continue;
            }
            short id = apiKeys.getField("id").getShort(key);
            short min = (Short) oldestVersion.invoke(key);
            short max = latestStable != null
                    ? (Short) latestStable.invoke(key, false)
                    : (Short) latestVersion.invoke(key);
            if (max < min) {
                continue; // only unstable versions: not served by default
            }
            rows.add(new short[] {id, min, max});
        }
        rows.sort((a, b) -> Short.compare(a[0], b[0]));
        StringBuilder out = new StringBuilder();
        for (short[] r : rows) {
            out.append(r[0]).append(' ').append(r[1]).append(' ').append(r[2]).append('\n');
        }
        System.out.print(out);
    }
}
