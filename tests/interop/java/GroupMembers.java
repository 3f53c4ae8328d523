// Several members of consumer groups in one JVM (kafka-clients 3.9.1), driven line by line
// from stdin by a test, so the test decides which member polls when: a member that is not
// polled runs no rebalance callback, so it cannot revoke (its heartbeats go on in the
// consumer's background thread). For tests/interop/test_consumer_group_protocol_cluster.py.
//
// Usage: java -cp <classes>:<kafka-clients jars> GroupMembers <bootstrap> [-Xkey=value ...]
// -Xkey=value properties go to every consumer (e.g. -Xgroup.protocol=consumer).
//
// Commands (one a line), each answered by one JSON object on one line of stdout:
//   new <name> <group> <topic>[,<topic>...]
//                 a consumer (earliest, no auto commit, String values) subscribed with a
//                 rebalance listener; on revocation the listener commits synchronously what
//                 the member read of the revoked partitions before it returns.
//   subscribe <name> <topic>[,<topic>...]
//   poll <name> <ms>
//                 one poll: {"events": [[kind, topic, partition]...], "records":
//                 [[topic, partition, offset, value]...]}; kind is assigned, revoked or lost,
//                 in the order the listener ran (all before the records of this poll).
//   commit <name> commitSync() (the positions of every partition the member holds), as an
//                 application committing after each poll does.
//   committed <name> <topic> <partitions>
//                 {"offsets": [offset or -1 per partition]}.
//   close <name>  close with a 30 s bound.
//   quit
// An exception answers {"error": "<class>: <message>"}; the driver carries on.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public final class GroupMembers {
    static final class Member implements ConsumerRebalanceListener {
        final KafkaConsumer<String, String> consumer;
        final Map<TopicPartition, Long> read = new HashMap<>();
        final Set<TopicPartition> held = new HashSet<>();
        final List<Object> events = new ArrayList<>();

        Member(Properties props) {
            consumer = new KafkaConsumer<>(props);
        }

        Map<TopicPartition, OffsetAndMetadata> positions(Collection<TopicPartition> parts) {
            Map<TopicPartition, OffsetAndMetadata> out = new HashMap<>();
            for (TopicPartition tp : parts) {
                Long at = read.get(tp);
                if (at != null) {
                    out.put(tp, new OffsetAndMetadata(at));
                }
            }
            return out;
        }

        void note(String kind, Collection<TopicPartition> parts) {
            for (TopicPartition tp : parts) {
                events.add(Arrays.asList(kind, tp.topic(), tp.partition()));
            }
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> parts) {
            note("revoked", parts);
            Map<TopicPartition, OffsetAndMetadata> done = positions(parts);
            if (!done.isEmpty()) {
                consumer.commitSync(done, Duration.ofSeconds(30));
            }
            held.removeAll(parts);
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> parts) {
            note("assigned", parts);
            held.addAll(parts);
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> parts) {
            note("lost", parts);
            held.removeAll(parts);
        }
    }

    final String bootstrap;
    final Map<String, String> extra;
    final Map<String, Member> members = new HashMap<>();

    GroupMembers(String bootstrap, Map<String, String> extra) {
        this.bootstrap = bootstrap;
        this.extra = extra;
    }

    public static void main(String[] argv) throws Exception {
        if (argv.length < 1) {
            System.err.println("usage: GroupMembers <bootstrap> [-Xkey=value ...]");
            System.exit(2);
        }
        Map<String, String> extra = new HashMap<>();
        for (String a : Arrays.asList(argv).subList(1, argv.length)) {
            int eq = a.indexOf('=');
            if (!a.startsWith("-X") || eq < 0) {
                System.err.println("bad argument: " + a);
                System.exit(2);
            }
            extra.put(a.substring(2, eq), a.substring(eq + 1));
        }
        GroupMembers driver = new GroupMembers(argv[0], extra);
        BufferedReader in = new BufferedReader(
            new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] cmd = line.trim().split(" ");
            if (cmd[0].equals("quit")) {
                break;
            }
            Object answer;
            try {
                answer = driver.run(cmd);
            } catch (Exception e) {
                answer = Map.of("error", e.getClass().getName() + ": " + e.getMessage());
            }
            System.out.println(Json.write(answer));
            System.out.flush();
        }
        for (Member m : driver.members.values()) {
            m.consumer.close(Duration.ofSeconds(30));
        }
    }

    Member member(String name) {
        Member m = members.get(name);
        if (m == null) {
            throw new IllegalArgumentException("no member " + name);
        }
        return m;
    }

    Object run(String[] cmd) {
        switch (cmd[0]) {
            case "new": {
                Properties props = new Properties();
                props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
                props.put(ConsumerConfig.GROUP_ID_CONFIG, cmd[2]);
                props.put(ConsumerConfig.CLIENT_ID_CONFIG, cmd[1]);
                props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
                props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
                props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG,
                    StringDeserializer.class.getName());
                props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
                    StringDeserializer.class.getName());
                props.putAll(extra);
                Member m = new Member(props);
                members.put(cmd[1], m);
                m.consumer.subscribe(Arrays.asList(cmd[3].split(",")), m);
                return Map.of("ok", true);
            }
            case "subscribe": {
                Member m = member(cmd[1]);
                m.consumer.subscribe(Arrays.asList(cmd[2].split(",")), m);
                return Map.of("ok", true);
            }
            case "poll": {
                Member m = member(cmd[1]);
                m.events.clear();
                List<Object> records = new ArrayList<>();
                for (ConsumerRecord<String, String> r
                        : m.consumer.poll(Duration.ofMillis(Long.parseLong(cmd[2])))) {
                    records.add(Arrays.asList(r.topic(), r.partition(), r.offset(), r.value()));
                    m.read.put(new TopicPartition(r.topic(), r.partition()), r.offset() + 1);
                }
                return Map.of("events", new ArrayList<>(m.events), "records", records);
            }
            case "commit": {
                member(cmd[1]).consumer.commitSync(Duration.ofSeconds(30));
                return Map.of("ok", true);
            }
            case "committed": {
                Member m = member(cmd[1]);
                Set<TopicPartition> parts = new HashSet<>();
                int count = Integer.parseInt(cmd[3]);
                for (int p = 0; p < count; p++) {
                    parts.add(new TopicPartition(cmd[2], p));
                }
                Map<TopicPartition, OffsetAndMetadata> got =
                    m.consumer.committed(parts, Duration.ofSeconds(30));
                List<Object> offsets = new ArrayList<>();
                for (int p = 0; p < count; p++) {
                    OffsetAndMetadata o = got.get(new TopicPartition(cmd[2], p));
                    offsets.add(o == null ? -1L : o.offset());
                }
                return Map.of("offsets", offsets);
            }
            case "close": {
                Member m = members.remove(cmd[1]);
                if (m != null) {
                    m.consumer.close(Duration.ofSeconds(30));
                }
                return Map.of("ok", true);
            }
            default:
                throw new IllegalArgumentException("unknown command " + cmd[0]);
        }
    }

    static final class Json {
        static String write(Object o) {
            StringBuilder sb = new StringBuilder();
            write(sb, o);
            return sb.toString();
        }

        static void write(StringBuilder sb, Object o) {
            if (o == null) {
                sb.append("null");
            } else if (o instanceof Number || o instanceof Boolean) {
                sb.append(o);
            } else if (o instanceof Map) {
                sb.append('{');
                String sep = "";
                for (Map.Entry<?, ?> e : ((Map<?, ?>) o).entrySet()) {
                    sb.append(sep);
                    sep = ",";
                    string(sb, String.valueOf(e.getKey()));
                    sb.append(':');
                    write(sb, e.getValue());
                }
                sb.append('}');
            } else if (o instanceof Collection) {
                sb.append('[');
                String sep = "";
                for (Object x : (Collection<?>) o) {
                    sb.append(sep);
                    sep = ",";
                    write(sb, x);
                }
                sb.append(']');
            } else {
                string(sb, o.toString());
            }
        }

        static void string(StringBuilder sb, String s) {
            sb.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                if (c == '"' || c == '\\') {
                    sb.append('\\').append(c);
                } else if (c < 0x20) {
                    sb.append(String.format("\\u%04x", (int) c));
                } else {
                    sb.append(c);
                }
            }
            sb.append('"');
        }
    }
}
