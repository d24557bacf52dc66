// Runs the commands of one Kafka command-line tool (its class given as the only argument, such
// as org.apache.kafka.tools.FeatureCommand) in one JVM, one per line read from stdin: the
// line holds the tool's arguments separated by tabs. The tool's `mainNoExit` runs with
// System.out and System.err captured, and one JSON line answers each command:
//   {"exit":RC,"out":"<base64 of stdout>","err":"<base64 of stderr>"}
// A JVM start costs a second or more; a command here, milliseconds plus the tool's own work.
// Used by tests/interop/kafka_env.py (run_feature_command).

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.Base64;

public class ToolServer {
    public static void main(String[] argv) throws Exception {
        if (argv.length != 1) {
            System.err.println("usage: ToolServer TOOL_CLASS");
            System.exit(1);
        }
        Method tool = Class.forName(argv[0]).getDeclaredMethod("mainNoExit", String[].class);
        tool.setAccessible(true);
        PrintStream realOut = System.out, realErr = System.err;
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] args = line.isEmpty() ? new String[0] : line.split("\t", -1);
            ByteArrayOutputStream out = new ByteArrayOutputStream(), err = new ByteArrayOutputStream();
            PrintStream capturedOut = new PrintStream(out, true, StandardCharsets.UTF_8);
            PrintStream capturedErr = new PrintStream(err, true, StandardCharsets.UTF_8);
            int rc;
            System.setOut(capturedOut);
            System.setErr(capturedErr);
            try {
                rc = (Integer) tool.invoke(null, (Object) args);
            } catch (InvocationTargetException e) {
                e.getCause().printStackTrace(capturedErr);
                rc = 1;
            } finally {
                capturedOut.flush();
                capturedErr.flush();
                System.setOut(realOut);
                System.setErr(realErr);
            }
            Base64.Encoder b64 = Base64.getEncoder();
            realOut.println("{\"exit\":" + rc + ",\"out\":\"" + b64.encodeToString(out.toByteArray())
                + "\",\"err\":\"" + b64.encodeToString(err.toByteArray()) + "\"}");
            realOut.flush();
        }
    }
}
