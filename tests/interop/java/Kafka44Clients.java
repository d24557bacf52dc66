// Kafka 4.4 Java clients through kshim (tests/interop/test_kafka_releases.py and the lab matrix
// of test_lab_matrix.py), compiled and run against the 4.4.0 jars. Each command prints one JSON
// object on stdout; exit 0 = ran to its end with every record, 2 = failed (the JSON has an
// "error" member), 1 = usage error. Minimal JSON by hand: the values printed are plain ASCII.
//
//   produce --bootstrap B --topic T --count N --timeout-ms MS
//       Admin 4.4 creates T (3 partitions); an idempotent 4.4 producer writes p-0..p-(N-1).
//       {"produced":N}
//   consume --bootstrap B --topic T --group G --protocol classic|consumer --count N --timeout-ms MS
//       As produce, then a 4.4 KafkaConsumer in G with that group.protocol reads all N.
//       {"consumed":N}
//   share --bootstrap B --topic T --group G --count N --timeout-ms MS
//       Admin 4.4 creates T (3 partitions) and sets the share group G to start at the earliest
//       offset; a 4.4 producer writes share-0..share-(N-1); a KafkaShareConsumer in G reads
//       until it has seen all N (acknowledging each batch), then closes.
//       {"produced":N,"consumed":[values]}
//   streams --bootstrap B --input I --output O --app-id A --count N --timeout-ms MS
//       Admin 4.4 creates I and O; a Kafka Streams 4.4 application with group.protocol=streams
//       upper-cases I into O; a 4.4 producer writes in-0..in-(N-1) to I and a 4.4 consumer
//       (group.protocol=consumer) reads O until it has N records.
//       {"state":S,"output":[values]}

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

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
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

public class Kafka44Clients {
    static Map<String, String> parse(String[] argv) {
        Map<String, String> args = new HashMap<>();
        for (int i = 1; i + 1 < argv.length; i += 2) {
            args.put(argv[i], argv[i + 1]);
        }
        return args;
    }

    static String json(List<String> values) {
        StringBuilder b = new StringBuilder("[");
        for (int i = 0; i < values.size(); i++) {
            b.append(i == 0 ? "" : ",").append('"').append(values.get(i)).append('"');
        }
        return b.append(']').toString();
    }

    static String quote(String s) {
        return '"' + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + '"';
    }

    public static void main(String[] argv) {
        if (argv.length == 0) {
            System.err.println("usage: Kafka44Clients produce|consume|share|streams --bootstrap B ...");
            System.exit(1);
        }
        Map<String, String> args = parse(argv);
        long deadline = System.currentTimeMillis() + Long.parseLong(args.getOrDefault("--timeout-ms", "60000"));
        try {
            String out;
            switch (argv[0]) {
                case "produce": out = produceOnly(args); break;
                case "consume": out = consume(args, deadline); break;
                case "share": out = share(args, deadline); break;
                case "streams": out = streams(args, deadline); break;
                default:
                    System.err.println("unknown command " + argv[0]);
                    System.exit(1);
                    return;
            }
            System.out.println(out);
            System.exit(0);
        } catch (Throwable e) {
            e.printStackTrace();
            System.out.println("{\"error\":" + quote(e.toString()) + "}");
            System.exit(2);
        }
    }

    static Admin admin(String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        return Admin.create(p);
    }

    static void create(Admin admin, String... topics) throws Exception {
        List<NewTopic> wanted = new ArrayList<>();
        for (String t : topics) {
            wanted.add(new NewTopic(t, 3, (short) 1));
        }
        try {
            admin.createTopics(wanted).all().get();
        } catch (ExecutionException e) {
            if (!(e.getCause() instanceof TopicExistsException)) {
                throw e;
            }
        }
    }

    static KafkaProducer<String, String> producer(String bootstrap) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static void produce(String bootstrap, String topic, String prefix, int n) throws Exception {
        try (KafkaProducer<String, String> producer = producer(bootstrap)) {
            for (int i = 0; i < n; i++) {
                producer.send(new ProducerRecord<>(topic, prefix + i, prefix + i)).get();
            }
        }
    }

    static String produceOnly(Map<String, String> args) throws Exception {
        String bootstrap = args.get("--bootstrap"), topic = args.get("--topic");
        int n = Integer.parseInt(args.get("--count"));
        try (Admin admin = admin(bootstrap)) {
            create(admin, topic);
        }
        produce(bootstrap, topic, "p-", n);
        return "{\"produced\":" + n + "}";
    }

    static String consume(Map<String, String> args, long deadline) throws Exception {
        String bootstrap = args.get("--bootstrap"), topic = args.get("--topic");
        int n = Integer.parseInt(args.get("--count"));
        produceOnly(args);
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, args.get("--group"));
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, args.getOrDefault("--protocol", "classic"));
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        int seen = 0;
        try (KafkaConsumer<String, String> consumer =
                 new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(topic));
            while (seen < n && System.currentTimeMillis() < deadline) {
                seen += consumer.poll(Duration.ofMillis(500)).count();
            }
            consumer.commitSync();
        }
        complete(seen, n);
        return "{\"consumed\":" + seen + "}";
    }

    /** A run that did not see every record before its deadline failed. */
    static void complete(int seen, int n) {
        if (seen < n) {
            throw new IllegalStateException("read " + seen + " of " + n + " records before the deadline");
        }
    }

    static String share(Map<String, String> args, long deadline) throws Exception {
        String bootstrap = args.get("--bootstrap"), topic = args.get("--topic"), group = args.get("--group");
        int n = Integer.parseInt(args.get("--count"));
        try (Admin admin = admin(bootstrap)) {
            create(admin, topic);
            ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
            AlterConfigOp earliest = new AlterConfigOp(
                new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(earliest))).all().get();
        }
        produce(bootstrap, topic, "share-", n);
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        List<String> seen = new ArrayList<>();
        try (KafkaShareConsumer<String, String> consumer =
                 new KafkaShareConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(topic));
            while (seen.size() < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    seen.add(r.value());
                }
                consumer.commitSync();
            }
        }
        complete(seen.size(), n);
        return "{\"produced\":" + n + ",\"consumed\":" + json(seen) + "}";
    }

    static String streams(Map<String, String> args, long deadline) throws Exception {
        String bootstrap = args.get("--bootstrap"), input = args.get("--input"), output = args.get("--output");
        int n = Integer.parseInt(args.get("--count"));
        try (Admin admin = admin(bootstrap)) {
            create(admin, input, output);
        }
        Properties sp = new Properties();
        sp.put(StreamsConfig.APPLICATION_ID_CONFIG, args.get("--app-id"));
        sp.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        sp.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, "streams");
        sp.put(StreamsConfig.STATE_DIR_CONFIG, System.getProperty("java.io.tmpdir") + "/kshim-streams-" + args.get("--app-id"));
        sp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .mapValues(v -> v.toUpperCase())
            .to(output, Produced.with(Serdes.String(), Serdes.String()));
        List<String> seen = new ArrayList<>();
        String state;
        try (KafkaStreams streams = new KafkaStreams(builder.build(), sp)) {
            streams.start();
            // Waits while it starts; an application a broker refuses goes on to an error state.
            while ((streams.state() == KafkaStreams.State.CREATED || streams.state() == KafkaStreams.State.REBALANCING)
                   && System.currentTimeMillis() < deadline) {
                Thread.sleep(100);
            }
            state = streams.state().toString();
            if (streams.state() != KafkaStreams.State.RUNNING) {
                throw new IllegalStateException("Kafka Streams is " + state + ", not RUNNING, before the deadline");
            }
            produce(bootstrap, input, "in-", n);
            Properties cp = new Properties();
            cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            cp.put(ConsumerConfig.GROUP_ID_CONFIG, args.get("--app-id") + "-reader");
            cp.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
            cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            try (KafkaConsumer<String, String> consumer =
                     new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer())) {
                consumer.subscribe(List.of(output));
                while (seen.size() < n && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                        seen.add(r.value());
                    }
                }
            }
            streams.close(Duration.ofSeconds(10));
        }
        complete(seen.size(), n);
        return "{\"state\":" + quote(state) + ",\"output\":" + json(seen) + "}";
    }
}
