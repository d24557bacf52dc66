import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ConcurrentSkipListSet;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;

/**
 * A producer and a consumer bootstrapped across several kshim instances, kept going while the
 * instance they use is killed. Args: BOOTSTRAP TOPIC RECORDS INTERVAL_MS DEADLINE_MS.
 *
 * <p>The producer is idempotent (acks=all) and sends the numbers 0..RECORDS-1, one every
 * INTERVAL_MS, remembering which were acknowledged. The consumer is assigned every partition (no
 * group), reads from the beginning and keeps every value it reads, in order. Both recover with
 * metadata.recovery.strategy=rebootstrap. A progress line {"acked":N,"consumed":M} is printed
 * every second; at the end (all acknowledged records read, or DEADLINE_MS) one line
 * {"done":true,"acked":[...],"consumed":[...],"failed":N}.
 */
public class ClusterFailover {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int records = Integer.parseInt(args[2]);
        long interval = Long.parseLong(args[3]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[4]);

        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        common.put("metadata.recovery.strategy", "rebootstrap");
        common.put("reconnect.backoff.ms", "100");
        common.put("reconnect.backoff.max.ms", "1000");
        common.put("request.timeout.ms", "10000");
        common.put("socket.connection.setup.timeout.ms", "2000");
        common.put("socket.connection.setup.timeout.max.ms", "4000");

        Properties p = new Properties();
        p.putAll(common);
        p.put("acks", "all");
        p.put("enable.idempotence", "true");
        p.put("delivery.timeout.ms", "120000");
        p.put("linger.ms", "0");
        p.put("key.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        p.put("value.serializer", "org.apache.kafka.common.serialization.StringSerializer");

        Properties c = new Properties();
        c.putAll(common);
        c.put("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        c.put("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        c.put("isolation.level", "read_committed");

        ConcurrentSkipListSet<Integer> acked = new ConcurrentSkipListSet<>();
        AtomicInteger failed = new AtomicInteger();
        List<Integer> consumed = new ArrayList<>();

        Thread producing = new Thread(() -> {
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
                for (int i = 0; i < records && System.currentTimeMillis() < deadline; i++) {
                    final int n = i;
                    producer.send(new ProducerRecord<>(topic, Integer.toString(n), Integer.toString(n)), (md, e) -> {
                        if (e == null) {
                            acked.add(n);
                        } else {
                            failed.incrementAndGet();
                        }
                    });
                    Thread.sleep(interval);
                }
                producer.flush();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        producing.start();

        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            List<PartitionInfo> partitions = consumer.partitionsFor(topic, Duration.ofSeconds(30));
            List<TopicPartition> assigned = partitions.stream()
                    .map(info -> new TopicPartition(topic, info.partition()))
                    .collect(Collectors.toList());
            consumer.assign(assigned);
            consumer.seekToBeginning(assigned);
            long nextProgress = 0;
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    consumed.add(Integer.parseInt(r.value()));
                }
                long now = System.currentTimeMillis();
                if (now >= nextProgress) {
                    System.out.println("{\"acked\":" + acked.size() + ",\"consumed\":" + consumed.size() + "}");
                    System.out.flush();
                    nextProgress = now + 1000;
                }
                if (!producing.isAlive() && consumed.containsAll(acked)) {
                    break;
                }
            }
        }
        producing.join(5000);
        System.out.println("{\"done\":true,\"acked\":" + acked + ",\"consumed\":" + consumed
                + ",\"failed\":" + failed.get() + "}");
        System.exit(0);
    }
}
