// Odradek interop driver built on the official Apache Kafka Java client (kafka-clients 3.9.1).
//
// Usage: OdradekInterop <bootstrap> <mode> <topic> [positional args] [-Xkey=value ...]
//
// Modes:
//   roundtrip [N]            create topic (3 partitions, RF 1), produce N keyed records with
//                            headers per compression type (none, gzip, snappy, lz4, zstd) with
//                            default (idempotent) producer settings, read everything back with
//                            assign + seekToBeginning, verify, listOffsets (earliest, latest,
//                            by timestamp, max timestamp), describeConfigs, deleteTopics.
//   produce N [codec]        produce N records (key-i / value-i, header idx=i) to the topic.
//   consume-count [expected] read the topic from the beginning up to its current end offsets
//                            (assign, no group) and report the count; non-zero exit if it
//                            differs from expected.
//   group-consume <group> <expected>
//                            subscribe with group.id, poll until `expected` records arrived,
//                            commitSync, report committed offsets.
//   pattern-consume <group> <pattern> <before> <new-topic> <after>
//                            subscribe with group.id to a Pattern, poll until `before`
//                            records arrived, create <new-topic> (1 partition) and produce
//                            `after` records to it, poll until they arrived too; report the
//                            topics assigned (the topic argument is not used).
//   authorized-operations <group>
//                            describeTopics, describeCluster and describeConsumerGroups with
//                            and without includeAuthorizedOperations; report the operations.
//   produce-keyless N        produce N records in one batch to partition 0, every tenth
//                            (i % 10 == 5) without a key; report how each send failed.
//   client-quotas <client-id>
//                            alterClientQuotas (the client id's producer and consumer byte
//                            rates, the default client id's mutation rate), then
//                            describeClientQuotas of each and of all; a user + client-id
//                            entity (set, described by its user, removed);
//                            remove the client id's quotas and describe again.
//   mutation-quota <count> <partitions>
//                            create <count> topics <topic>-<i> of <partitions> partitions in
//                            one request with retryOnQuotaViolation(false) (report each
//                            topic's outcome and a ThrottlingQuotaExceededException's
//                            throttleTimeMs); then create one more with the default retries
//                            (report how long it took); then delete the first two in one
//                            request without retries (report each topic's outcome).
//   broker-configs <broker-id> [set:key=value | delete:key ...]
//                            describeConfigs of the BROKER resource (synonyms and
//                            documentation asked), then one incrementalAlterConfigs per
//                            argument; report every entry and how each alter ended (the topic
//                            argument is not used).
//   create [partitions] [rf] create the topic.
//   delete                   delete the topic.
//
//   selftest <what>          checks of the server mode (see selftest below).
//
// OdradekInterop --serve <reply-file> <parent-pid> runs one command line per line of stdin
// in this JVM (see Server below).
//
// -Xkey=value arguments are passed to every client (admin, producer, consumer) the mode uses.
// One JSON object is printed on stdout as the last line. Exit codes: 0 ok, 1 verification
// mismatch, 2 usage error, 3 unexpected exception.

import java.io.FileOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class OdradekInterop {
    static final List<String> CODECS = List.of("none", "gzip", "snappy", "lz4", "zstd");
    static final long FUTURE_TIMEOUT_S = 60;
    static final long CONSUME_TIMEOUT_MS = 60_000;

    final String bootstrap;
    final String topic;
    final Map<String, String> extra;
    final Map<String, Object> summary = new LinkedHashMap<>();
    final List<String> errors = new ArrayList<>();

    OdradekInterop(String bootstrap, String topic, Map<String, String> extra) {
        this.bootstrap = bootstrap;
        this.topic = topic;
        this.extra = extra;
    }

    public static void main(String[] argv) throws Exception {
        if (argv.length == 3 && argv[0].equals("--serve")) {
            Server.serve(argv[1], Long.parseLong(argv[2]));
            return;
        }
        System.exit(run(argv));
    }

    /** A usage error: its message is printed already, the run's exit code is 2. */
    static final class UsageError extends RuntimeException {
        UsageError(String why) {
            super(why, null, false, false);
        }
    }

    /** Run one command line (a mode); returns its exit code. */
    static int run(String[] argv) {
        try {
            return runMode(argv);
        } catch (UsageError e) {
            return 2;
        }
    }

    static int runMode(String[] argv) {
        List<String> positional = new ArrayList<>();
        Map<String, String> extra = new LinkedHashMap<>();
        for (String a : argv) {
            if (a.startsWith("-X")) {
                int eq = a.indexOf('=');
                if (eq < 3) {
                    usage("bad client property " + a);
                }
                extra.put(a.substring(2, eq), a.substring(eq + 1));
            } else {
                positional.add(a);
            }
        }
        if (positional.size() < 3) {
            usage("need <bootstrap> <mode> <topic>");
        }
        String mode = positional.get(1);
        OdradekInterop app = new OdradekInterop(positional.get(0), positional.get(2), extra);
        List<String> args = positional.subList(3, positional.size());
        app.summary.put("mode", mode);
        app.summary.put("topic", app.topic);
        int rc;
        try {
            switch (mode) {
                case "roundtrip":
                    app.roundtrip(intArg(args, 0, 20));
                    break;
                case "produce":
                    app.produce(intArg(args, 0, 10), args.size() > 1 ? args.get(1) : "none");
                    break;
                case "consume-count":
                    app.consumeCount(args.isEmpty() ? -1 : Integer.parseInt(args.get(0)));
                    break;
                case "group-consume":
                    if (args.size() < 2) {
                        usage("group-consume needs <group> <expected>");
                    }
                    app.groupConsume(args.get(0), Integer.parseInt(args.get(1)));
                    break;
                case "pattern-consume":
                    if (args.size() < 5) {
                        usage("pattern-consume needs <group> <pattern> <before> <new-topic> <after>");
                    }
                    app.patternConsume(args.get(0), args.get(1), Integer.parseInt(args.get(2)),
                            args.get(3), Integer.parseInt(args.get(4)));
                    break;
                case "create":
                    app.create(intArg(args, 0, 3), (short) intArg(args, 1, 1));
                    break;
                case "delete":
                    app.delete();
                    break;
                case "elect-preferred":
                    app.electPreferred(intArg(args, 0, 1));
                    break;
                case "produce-keyless":
                    app.produceKeyless(intArg(args, 0, 100));
                    break;
                case "mutation-quota":
                    app.mutationQuota(intArg(args, 0, 4), intArg(args, 1, 5));
                    break;
                case "client-quotas":
                    if (args.isEmpty()) {
                        usage("client-quotas needs <client-id>");
                    }
                    app.clientQuotas(args.get(0));
                    break;
                case "broker-configs":
                    if (args.isEmpty()) {
                        usage("broker-configs needs <broker-id>");
                    }
                    app.brokerConfigs(args.get(0), args.subList(1, args.size()));
                    break;
                case "acls":
                    if (args.isEmpty()) {
                        usage("acls needs <principal>");
                    }
                    app.acls(args.get(0));
                    break;
                case "transactions":
                    if (args.isEmpty()) {
                        usage("transactions needs <transactional-id>");
                    }
                    app.transactions(args.get(0), intArg(args, 1, 30));
                    break;
                case "describe-producers":
                    if (args.isEmpty()) {
                        usage("describe-producers needs <transactional-id>");
                    }
                    app.describeProducers(args.get(0));
                    break;
                case "authorized-operations":
                    if (args.isEmpty()) {
                        usage("authorized-operations needs <group>");
                    }
                    app.authorizedOperations(args.get(0));
                    break;
                case "selftest":
                    app.selftest(args.isEmpty() ? "" : args.get(0));
                    break;
                default:
                    usage("unknown mode " + mode);
            }
            rc = app.errors.isEmpty() ? 0 : 1;
        } catch (UsageError u) {
            throw u;
        } catch (Throwable t) {
            Throwable root = t instanceof ExecutionException && t.getCause() != null ? t.getCause() : t;
            app.errors.add("exception: " + root);
            app.summary.put("exception", root.getClass().getName());
            System.err.println("OdradekInterop: unexpected exception");
            t.printStackTrace();
            rc = 3;
        }
        app.summary.put("ok", app.errors.isEmpty());
        app.summary.put("errors", app.errors);
        System.out.println(Json.write(app.summary));
        System.out.flush();
        return rc;
    }

    static int intArg(List<String> args, int i, int dflt) {
        return args.size() > i ? Integer.parseInt(args.get(i)) : dflt;
    }

    static void usage(String why) {
        System.err.println("OdradekInterop: " + why);
        System.err.println("usage: OdradekInterop <bootstrap> <mode> <topic> [args] [-Xkey=value ...]");
        System.err.println("modes: roundtrip [N] | produce N [codec] | consume-count [expected] |"
                + " group-consume <group> <expected> | create [partitions] [rf] | delete |"
                + " elect-preferred [partitions]");
        throw new UsageError(why);
    }

    void check(boolean cond, String what) {
        if (!cond) {
            errors.add(what);
        }
    }

    // ---------------------------------------------------------------- clients

    Properties base() {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", "odradek-interop");
        return p;
    }

    Admin admin() {
        Properties p = base();
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "30000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "60000");
        p.putAll(extra);
        return Admin.create(p);
    }

    /** A producer of byte arrays: the base settings, then {@code settings}, then the
     * command line's -X settings. */
    KafkaProducer<byte[], byte[]> producer(Map<String, String> settings) {
        Properties p = base();
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.putAll(settings);
        p.putAll(extra);
        return new KafkaProducer<>(p);
    }

    KafkaProducer<byte[], byte[]> producer(String codec) {
        // Everything else stays at the 3.9 defaults: acks=all, enable.idempotence=true.
        return producer(Map.of(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec));
    }

    /** A consumer of byte arrays without auto commit, in group {@code groupId} (reading
     * from the earliest offset) or none; {@code settings} and the -X settings last. */
    KafkaConsumer<byte[], byte[]> consumer(String groupId, Map<String, String> settings) {
        Properties p = base();
        if (groupId != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
            p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        }
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.putAll(settings);
        p.putAll(extra);
        return new KafkaConsumer<>(p);
    }

    KafkaConsumer<byte[], byte[]> consumer(String groupId) {
        return consumer(groupId, Map.of());
    }

    /** Assign every partition of the topic, read it from the start until each position
     * reaches the end offset the partition had then (or the consume timeout passes),
     * handing each record to {@code sink}; returns those end offsets. */
    Map<TopicPartition, Long> readToEnd(KafkaConsumer<byte[], byte[]> consumer, Duration poll,
            java.util.function.Consumer<ConsumerRecord<byte[], byte[]>> sink) {
        List<TopicPartition> tps = partitionsOf(consumer);
        consumer.assign(tps);
        consumer.seekToBeginning(tps);
        Map<TopicPartition, Long> end = consumer.endOffsets(tps, Duration.ofSeconds(FUTURE_TIMEOUT_S));
        long deadline = System.currentTimeMillis() + CONSUME_TIMEOUT_MS;
        while (System.currentTimeMillis() < deadline) {
            boolean done = true;
            for (TopicPartition tp : tps) {
                done &= consumer.position(tp) >= end.get(tp);
            }
            if (done) {
                break;
            }
            for (ConsumerRecord<byte[], byte[]> r : consumer.poll(poll)) {
                sink.accept(r);
            }
        }
        return end;
    }

    static byte[] utf8(String s) {
        return s == null ? null : s.getBytes(StandardCharsets.UTF_8);
    }

    static String str(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }

    static <T> T get(Future<T> f) throws Exception {
        return f.get(FUTURE_TIMEOUT_S, TimeUnit.SECONDS);
    }

    // ---------------------------------------------------------------- roundtrip

    static final class Expected {
        final String codec;
        final int index;
        final byte[] key;
        final byte[] value;
        final List<Header> headers;
        final long timestamp;
        RecordMetadata meta;

        Expected(String codec, int index, byte[] key, byte[] value, List<Header> headers, long ts) {
            this.codec = codec;
            this.index = index;
            this.key = key;
            this.value = value;
            this.headers = headers;
            this.timestamp = ts;
        }
    }

    void roundtrip(int n) throws Exception {
        final int partitions = 3;
        summary.put("records_per_codec", n);
        try (Admin admin = admin()) {
            get(admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all());
            summary.put("created", true);

            TopicDescription desc = describeTopicWithRetry(admin);
            check(desc.partitions().size() == partitions,
                    "describeTopics: expected " + partitions + " partitions, got " + desc.partitions().size());
            boolean leaders = true;
            for (TopicPartitionInfo tpi : desc.partitions()) {
                leaders &= tpi.leader() != null && !tpi.leader().isEmpty();
            }
            check(leaders, "describeTopics: some partition has no leader");
            summary.put("described_partitions", desc.partitions().size());

            // ---- produce, one idempotent producer per codec
            long base = System.currentTimeMillis() - 600_000L;
            List<Expected> expected = new ArrayList<>();
            Map<String, Object> produced = new LinkedHashMap<>();
            int g = 0;
            for (String codec : CODECS) {
                List<Expected> batch = new ArrayList<>();
                List<Future<RecordMetadata>> futures = new ArrayList<>();
                try (KafkaProducer<byte[], byte[]> producer = producer(codec)) {
                    for (int i = 0; i < n; i++, g++) {
                        byte[] key = utf8("key-" + codec + "-" + i + "-\u00e9");
                        // every 7th record (i % 7 == 3) is a tombstone; the others vary in size so
                        // that compression has something to chew on
                        byte[] value = i % 7 == 3 ? null
                                : utf8(("value-" + codec + "-" + i + "|").repeat(1 + i % 5));
                        List<Header> headers = new ArrayList<>();
                        headers.add(new RecordHeader("codec", utf8(codec)));
                        headers.add(new RecordHeader("idx", utf8(Integer.toString(i))));
                        headers.add(new RecordHeader("empty", new byte[0]));
                        headers.add(new RecordHeader("null", (byte[]) null));
                        long ts = base + g * 10L;
                        Expected e = new Expected(codec, i, key, value, headers, ts);
                        batch.add(e);
                        futures.add(producer.send(
                                new ProducerRecord<>(topic, null, ts, key, value, headers)));
                    }
                    producer.flush();
                    for (int i = 0; i < futures.size(); i++) {
                        batch.get(i).meta = get(futures.get(i));
                    }
                }
                produced.put(codec, batch.size());
                expected.addAll(batch);
            }
            summary.put("produced", produced);
            summary.put("produced_total", expected.size());

            // ---- consume everything back
            List<TopicPartition> tps = new ArrayList<>();
            for (int p = 0; p < partitions; p++) {
                tps.add(new TopicPartition(topic, p));
            }
            List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
            try (KafkaConsumer<byte[], byte[]> consumer = consumer(null)) {
                consumer.assign(tps);
                consumer.seekToBeginning(tps);
                long deadline = System.currentTimeMillis() + CONSUME_TIMEOUT_MS;
                while (got.size() < expected.size() && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                        got.add(r);
                    }
                }
                // one more short poll to catch duplicates beyond the expected count
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    got.add(r);
                }
            }
            summary.put("consumed_total", got.size());
            check(got.size() == expected.size(),
                    "consumed " + got.size() + " records, expected " + expected.size());
            verifyRecords(expected, got);

            // ---- listOffsets
            Map<Integer, List<ConsumerRecord<byte[], byte[]>>> byPartition = new TreeMap<>();
            for (int p = 0; p < partitions; p++) {
                byPartition.put(p, new ArrayList<>());
            }
            for (ConsumerRecord<byte[], byte[]> r : got) {
                byPartition.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r);
            }
            Map<String, Object> offsets = new LinkedHashMap<>();
            Map<TopicPartition, Long> earliest = listOffsets(admin, tps, OffsetSpec.earliest());
            Map<TopicPartition, Long> latest = listOffsets(admin, tps, OffsetSpec.latest());
            Map<String, Object> earliestJ = new LinkedHashMap<>();
            Map<String, Object> latestJ = new LinkedHashMap<>();
            for (TopicPartition tp : tps) {
                List<ConsumerRecord<byte[], byte[]>> rs = byPartition.get(tp.partition());
                long expEnd = rs.isEmpty() ? 0 : rs.get(rs.size() - 1).offset() + 1;
                earliestJ.put(Integer.toString(tp.partition()), earliest.get(tp));
                latestJ.put(Integer.toString(tp.partition()), latest.get(tp));
                check(earliest.get(tp) == 0L, "listOffsets earliest " + tp + " = " + earliest.get(tp) + ", expected 0");
                check(latest.get(tp) == expEnd, "listOffsets latest " + tp + " = " + latest.get(tp) + ", expected " + expEnd);
            }
            offsets.put("earliest", earliestJ);
            offsets.put("latest", latestJ);

            long total = expected.size();
            long[] probes = {base - 1, base + (total / 2) * 10L + 5, base + (total - 1) * 10L, base + total * 10L + 10_000};
            List<Object> byTs = new ArrayList<>();
            for (long t : probes) {
                Map<TopicPartition, Long> res = listOffsets(admin, tps, OffsetSpec.forTimestamp(t));
                Map<String, Object> row = new LinkedHashMap<>();
                row.put("timestamp_minus_base", t - base);
                Map<String, Object> parts = new LinkedHashMap<>();
                for (TopicPartition tp : tps) {
                    long exp = -1;
                    for (ConsumerRecord<byte[], byte[]> r : byPartition.get(tp.partition())) {
                        if (r.timestamp() >= t) {
                            exp = r.offset();
                            break;
                        }
                    }
                    parts.put(Integer.toString(tp.partition()), res.get(tp));
                    check(res.get(tp) == exp, "listOffsets forTimestamp(base+" + (t - base) + ") " + tp
                            + " = " + res.get(tp) + ", expected " + exp);
                }
                row.put("offsets", parts);
                byTs.add(row);
            }
            offsets.put("by_timestamp", byTs);

            try {
                Map<TopicPartition, Long> maxTs = listOffsets(admin, tps, OffsetSpec.maxTimestamp());
                Map<String, Object> mj = new LinkedHashMap<>();
                for (TopicPartition tp : tps) {
                    List<ConsumerRecord<byte[], byte[]>> rs = byPartition.get(tp.partition());
                    long exp = rs.isEmpty() ? -1 : rs.get(rs.size() - 1).offset();
                    mj.put(Integer.toString(tp.partition()), maxTs.get(tp));
                    check(maxTs.get(tp) == exp, "listOffsets maxTimestamp " + tp + " = " + maxTs.get(tp) + ", expected " + exp);
                }
                offsets.put("max_timestamp", mj);
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof UnsupportedVersionException)) {
                    throw e;
                }
                offsets.put("max_timestamp", "unsupported");
            }
            summary.put("list_offsets", offsets);

            // ---- describeConfigs
            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config cfg = get(admin.describeConfigs(List.of(res)).all()).get(res);
            Map<String, Object> cfgJ = new TreeMap<>();
            for (ConfigEntry e : cfg.entries()) {
                cfgJ.put(e.name(), e.value());
            }
            check(!cfgJ.isEmpty(), "describeConfigs returned no entries for the topic");
            summary.put("config_count", cfgJ.size());
            summary.put("configs", cfgJ);

            // ---- deleteTopics
            get(admin.deleteTopics(List.of(topic)).all());
            boolean gone = false;
            long deadline = System.currentTimeMillis() + 15_000;
            while (System.currentTimeMillis() < deadline) {
                Set<String> names = get(admin.listTopics().names());
                if (!names.contains(topic)) {
                    gone = true;
                    break;
                }
                Thread.sleep(200);
            }
            check(gone, "topic still listed 15 s after deleteTopics");
            summary.put("deleted", gone);
        }
    }

    TopicDescription describeTopicWithRetry(Admin admin) throws Exception {
        long deadline = System.currentTimeMillis() + 15_000;
        while (true) {
            try {
                return get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic);
            } catch (ExecutionException e) {
                if (System.currentTimeMillis() > deadline) {
                    throw e;
                }
                Thread.sleep(200);
            }
        }
    }

    Map<TopicPartition, Long> listOffsets(Admin admin, Collection<TopicPartition> tps, OffsetSpec spec)
            throws Exception {
        Map<TopicPartition, OffsetSpec> req = new HashMap<>();
        for (TopicPartition tp : tps) {
            req.put(tp, spec);
        }
        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> res = get(admin.listOffsets(req).all());
        Map<TopicPartition, Long> out = new HashMap<>();
        for (TopicPartition tp : tps) {
            out.put(tp, res.get(tp).offset());
        }
        return out;
    }

    void verifyRecords(List<Expected> expected, List<ConsumerRecord<byte[], byte[]>> got) {
        Map<String, Expected> byKey = new HashMap<>();
        for (Expected e : expected) {
            byKey.put(str(e.key), e);
        }
        Map<String, Integer> seen = new HashMap<>();
        Map<Integer, Long> lastOffset = new HashMap<>();
        Map<Integer, Long> firstOffset = new HashMap<>();
        int bad = 0;
        for (ConsumerRecord<byte[], byte[]> r : got) {
            String k = str(r.key());
            Expected e = byKey.get(k);
            List<String> probs = new ArrayList<>();
            if (e == null) {
                probs.add("unexpected key");
            } else {
                seen.merge(k, 1, Integer::sum);
                if (!Arrays.equals(e.value, r.value())) {
                    probs.add("value " + str(r.value()) + " != " + str(e.value));
                }
                if (e.timestamp != r.timestamp()) {
                    probs.add("timestamp " + r.timestamp() + " != " + e.timestamp);
                }
                if (r.partition() != e.meta.partition() || r.offset() != e.meta.offset()) {
                    probs.add("at " + r.partition() + "/" + r.offset() + " but producer acked "
                            + e.meta.partition() + "/" + e.meta.offset());
                }
                Header[] hs = r.headers().toArray();
                if (hs.length != e.headers.size()) {
                    probs.add(hs.length + " headers, expected " + e.headers.size());
                } else {
                    for (int i = 0; i < hs.length; i++) {
                        Header want = e.headers.get(i);
                        if (!Objects.equals(hs[i].key(), want.key()) || !Arrays.equals(hs[i].value(), want.value())) {
                            probs.add("header " + i + " " + hs[i].key() + "=" + str(hs[i].value())
                                    + " != " + want.key() + "=" + str(want.value()));
                        }
                    }
                }
            }
            Long prev = lastOffset.get(r.partition());
            if (prev != null && r.offset() != prev + 1) {
                probs.add("offset gap/reorder in partition " + r.partition() + ": " + prev + " -> " + r.offset());
            }
            lastOffset.put(r.partition(), r.offset());
            firstOffset.putIfAbsent(r.partition(), r.offset());
            if (!probs.isEmpty()) {
                bad++;
                if (bad <= 20) {
                    errors.add("record " + r.partition() + "/" + r.offset() + " key=" + k + ": " + String.join("; ", probs));
                }
            }
        }
        for (Map.Entry<Integer, Long> fo : firstOffset.entrySet()) {
            check(fo.getValue() == 0L, "partition " + fo.getKey() + " starts at offset " + fo.getValue());
        }
        int missing = 0;
        int dup = 0;
        for (Expected e : expected) {
            int c = seen.getOrDefault(str(e.key), 0);
            if (c == 0) {
                missing++;
            } else if (c > 1) {
                dup++;
            }
        }
        check(missing == 0, missing + " produced records never consumed");
        check(dup == 0, dup + " records consumed more than once");
        check(bad == 0, bad + " consumed records did not match what was produced");
        summary.put("mismatched_records", bad);
        summary.put("missing_records", missing);
        summary.put("duplicate_records", dup);
        Map<String, Object> perPartition = new TreeMap<>();
        for (Map.Entry<Integer, Long> lo : lastOffset.entrySet()) {
            perPartition.put(Integer.toString(lo.getKey()), lo.getValue() + 1);
        }
        summary.put("partition_end_offsets", perPartition);
    }

    // ---------------------------------------------------------------- other modes

    void produce(int n, String codec) throws Exception {
        Map<String, Object> last = new TreeMap<>();
        try (KafkaProducer<byte[], byte[]> producer = producer(codec)) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                List<Header> headers = List.of(new RecordHeader("idx", utf8(Integer.toString(i))));
                futures.add(producer.send(new ProducerRecord<>(topic, null, utf8("key-" + i),
                        utf8("value-" + i), headers)));
            }
            producer.flush();
            for (Future<RecordMetadata> f : futures) {
                RecordMetadata m = get(f);
                last.merge(Integer.toString(m.partition()), m.offset(), (a, b) -> Math.max((Long) a, (Long) b));
            }
        }
        summary.put("codec", codec);
        summary.put("produced", n);
        summary.put("last_offsets", last);
    }

    /** Transactions (KIP-98): commit n records over the topic's partitions with an offset
     * of group "<id>-group" in the transaction, abort n more, commit 3 more; then read the
     * topic read_committed and read_uncommitted to its end (the LSO / the high watermark). */
    void transactions(String transactionalId, int n) throws Exception {
        String group = transactionalId + "-group";
        int partitions;
        try (KafkaProducer<byte[], byte[]> producer =
                producer(Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId))) {
            producer.initTransactions();
            partitions = producer.partitionsFor(topic).size();
            producer.beginTransaction();
            for (int i = 0; i < n; i++) {
                producer.send(new ProducerRecord<>(topic, i % partitions, null, utf8("c1-" + i)));
            }
            producer.sendOffsetsToTransaction(
                    Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(5)),
                    new org.apache.kafka.clients.consumer.ConsumerGroupMetadata(group));
            producer.commitTransaction();
            producer.beginTransaction();
            for (int i = 0; i < n; i++) {
                producer.send(new ProducerRecord<>(topic, i % partitions, null, utf8("a2-" + i)));
            }
            producer.flush();
            producer.abortTransaction();
            producer.beginTransaction();
            for (int i = 0; i < 3; i++) {
                producer.send(new ProducerRecord<>(topic, i % partitions, null, utf8("c3-" + i)));
            }
            producer.commitTransaction();
        }
        for (String isolation : List.of("read_committed", "read_uncommitted")) {
            List<String> values = new ArrayList<>();
            try (KafkaConsumer<byte[], byte[]> consumer =
                    consumer(null, Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation))) {
                readToEnd(consumer, Duration.ofMillis(200),
                        r -> values.add(r.partition() + ":" + str(r.value())));
            }
            summary.put(isolation, values);
        }
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(group)) {
            TopicPartition tp0 = new TopicPartition(topic, 0);
            OffsetAndMetadata committed = consumer.committed(Set.of(tp0), Duration.ofSeconds(FUTURE_TIMEOUT_S)).get(tp0);
            summary.put("group_offset", committed == null ? null : committed.offset());
        }
    }

    /** DescribeProducers (KIP-664) through Admin.describeProducers while a transactional
     * producer holds a transaction open on partition 0 (its state in "producers"), then
     * once more once the abort marker is written ("after_abort"). */
    void describeProducers(String transactionalId) throws Exception {
        TopicPartition tp0 = new TopicPartition(topic, 0);
        try (KafkaProducer<byte[], byte[]> producer =
                producer(Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId));
             Admin admin = admin()) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < 3; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, utf8("open-" + i))).get();
            }
            summary.put("producers", producersOf(admin, tp0));
            producer.abortTransaction();
            // the abort answers once PrepareAbort is written; the marker follows
            long deadline = System.currentTimeMillis() + CONSUME_TIMEOUT_MS;
            List<Map<String, Object>> after = producersOf(admin, tp0);
            while (after.stream().anyMatch(m -> (Long) m.get("txn_start_offset") >= 0)
                    && System.currentTimeMillis() < deadline) {
                Thread.sleep(50);
                after = producersOf(admin, tp0);
            }
            summary.put("after_abort", after);
        }
    }

    List<Map<String, Object>> producersOf(Admin admin, TopicPartition tp) throws Exception {
        List<Map<String, Object>> out = new ArrayList<>();
        for (org.apache.kafka.clients.admin.ProducerState s : admin.describeProducers(List.of(tp))
                .partitionResult(tp).get(FUTURE_TIMEOUT_S, TimeUnit.SECONDS).activeProducers()) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("producer_id", s.producerId());
            m.put("producer_epoch", s.producerEpoch());
            m.put("last_sequence", s.lastSequence());
            m.put("last_timestamp", s.lastTimestamp());
            m.put("coordinator_epoch", s.coordinatorEpoch().isPresent() ? s.coordinatorEpoch().getAsInt() : -1);
            m.put("txn_start_offset", s.currentTransactionStartOffset().isPresent()
                    ? s.currentTransactionStartOffset().getAsLong() : -1L);
            out.add(m);
        }
        return out;
    }

    List<TopicPartition> partitionsOf(KafkaConsumer<byte[], byte[]> consumer) {
        List<PartitionInfo> infos = consumer.partitionsFor(topic, Duration.ofSeconds(FUTURE_TIMEOUT_S));
        List<TopicPartition> tps = new ArrayList<>();
        if (infos != null) {
            for (PartitionInfo pi : infos) {
                tps.add(new TopicPartition(topic, pi.partition()));
            }
        }
        return tps;
    }

    void consumeCount(int expectedCount) {
        Map<String, Object> counts = new TreeMap<>();
        int[] total = {0};
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(null)) {
            Map<TopicPartition, Long> end = readToEnd(consumer, Duration.ofMillis(500), r -> {
                counts.merge(Integer.toString(r.partition()), 1, (a, b) -> (Integer) a + (Integer) b);
                total[0]++;
            });
            check(!end.isEmpty(), "topic has no partitions (does it exist?)");
            Map<String, Object> endJ = new TreeMap<>();
            for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
                endJ.put(Integer.toString(e.getKey().partition()), e.getValue());
            }
            summary.put("end_offsets", endJ);
        }
        summary.put("count", total[0]);
        summary.put("per_partition", counts);
        if (expectedCount >= 0) {
            check(total[0] == expectedCount, "consumed " + total[0] + " records, expected " + expectedCount);
        }
    }

    void groupConsume(String group, int expectedCount) {
        int total = 0;
        Map<String, Object> committed = new TreeMap<>();
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(group)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + CONSUME_TIMEOUT_MS;
            while (total < expectedCount && System.currentTimeMillis() < deadline) {
                total += consumer.poll(Duration.ofMillis(500)).count();
            }
            consumer.commitSync(Duration.ofSeconds(FUTURE_TIMEOUT_S));
            Set<TopicPartition> assigned = consumer.assignment();
            Map<TopicPartition, OffsetAndMetadata> c =
                    consumer.committed(assigned, Duration.ofSeconds(FUTURE_TIMEOUT_S));
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : c.entrySet()) {
                committed.put(Integer.toString(e.getKey().partition()),
                        e.getValue() == null ? null : e.getValue().offset());
            }
        }
        summary.put("group", group);
        summary.put("count", total);
        summary.put("committed", committed);
        check(total == expectedCount, "consumed " + total + " records, expected " + expectedCount);
    }

    void patternConsume(String group, String pattern, int before, String newTopic, int after)
            throws Exception {
        int total = 0;
        Set<String> topics = new java.util.TreeSet<>();
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(group)) {
            consumer.subscribe(java.util.regex.Pattern.compile(pattern));
            long deadline = System.currentTimeMillis() + CONSUME_TIMEOUT_MS;
            while (total < before && System.currentTimeMillis() < deadline) {
                total += consumer.poll(Duration.ofMillis(200)).count();
            }
            summary.put("before", total);
            try (Admin admin = admin()) {
                get(admin.createTopics(List.of(new NewTopic(newTopic, 1, (short) 1))).all());
            }
            try (KafkaProducer<byte[], byte[]> producer = producer("none")) {
                for (int i = 0; i < after; i++) {
                    producer.send(new ProducerRecord<>(newTopic,
                            ("v" + i).getBytes(StandardCharsets.UTF_8))).get();
                }
            }
            deadline = System.currentTimeMillis() + CONSUME_TIMEOUT_MS;
            while (total < before + after && System.currentTimeMillis() < deadline) {
                total += consumer.poll(Duration.ofMillis(200)).count();
            }
            for (TopicPartition tp : consumer.assignment()) {
                topics.add(tp.topic());
            }
        }
        summary.put("group", group);
        summary.put("count", total);
        summary.put("topics", new ArrayList<>(topics));
        check(total == before + after, "consumed " + total + " records, expected "
                + (before + after));
    }

    void create(int partitions, short rf) throws Exception {
        try (Admin admin = admin()) {
            get(admin.createTopics(List.of(new NewTopic(topic, partitions, rf))).all());
        }
        summary.put("created", true);
        summary.put("partitions", partitions);
    }

    void delete() throws Exception {
        try (Admin admin = admin()) {
            get(admin.deleteTopics(List.of(topic)).all());
        }
        summary.put("deleted", true);
    }

    /** Admin.electLeaders(PREFERRED) for partitions 0..n-1; each partition's outcome
     * ("none" or the exception's class) in summary.elected. */
    void electPreferred(int partitions) throws Exception {
        Set<TopicPartition> tps = new java.util.HashSet<>();
        for (int p = 0; p < partitions; p++) {
            tps.add(new TopicPartition(topic, p));
        }
        Map<String, Object> outcome = new TreeMap<>();
        try (Admin admin = admin()) {
            Map<TopicPartition, java.util.Optional<Throwable>> result =
                get(admin.electLeaders(org.apache.kafka.common.ElectionType.PREFERRED, tps)
                    .partitions());
            for (Map.Entry<TopicPartition, java.util.Optional<Throwable>> e : result.entrySet()) {
                outcome.put(String.valueOf(e.getKey().partition()),
                    e.getValue().map(t -> t.getClass().getSimpleName()).orElse("none"));
            }
        }
        summary.put("elected", outcome);
    }

    void produceKeyless(int n) throws Exception {
        Map<String, Object> outcomes = new TreeMap<>();
        List<Object> named = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = producer(Map.of(
                ProducerConfig.LINGER_MS_CONFIG, "1000",
                ProducerConfig.BATCH_SIZE_CONFIG, "1000000"))) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                byte[] key = i % 10 == 5 ? null : utf8("key-" + i);
                futures.add(producer.send(new ProducerRecord<>(topic, 0, key, utf8("v" + i))));
            }
            producer.flush();
            for (int i = 0; i < n; i++) {
                String outcome;
                try {
                    get(futures.get(i));
                    outcome = "ok";
                } catch (ExecutionException e) {
                    Throwable c = e.getCause();
                    outcome = c.getClass().getSimpleName();
                    if (c.getMessage() != null && c.getMessage().contains("without key")) {
                        named.add(i);
                        outcome += " (named)";
                    }
                }
                outcomes.merge(outcome, 1, (a, b) -> (Integer) a + (Integer) b);
            }
        }
        summary.put("outcomes", outcomes);
        summary.put("named", named);
    }

    static Object opNames(Set<org.apache.kafka.common.acl.AclOperation> ops) {
        if (ops == null) {
            return null;
        }
        List<String> names = new ArrayList<>();
        for (org.apache.kafka.common.acl.AclOperation op : ops) {
            names.add(op.name());
        }
        java.util.Collections.sort(names);
        return names;
    }

    static Map<String, Object> describedQuotas(Admin admin,
            org.apache.kafka.common.quota.ClientQuotaFilter filter) throws Exception {
        Map<String, Object> out = new TreeMap<>();
        Map<org.apache.kafka.common.quota.ClientQuotaEntity, Map<String, Double>> found =
                get(admin.describeClientQuotas(filter).entities());
        for (Map.Entry<org.apache.kafka.common.quota.ClientQuotaEntity, Map<String, Double>> e
                : found.entrySet()) {
            String name = e.getKey().entries().get(
                    org.apache.kafka.common.quota.ClientQuotaEntity.CLIENT_ID);
            out.put(name == null ? "<default>" : name, new TreeMap<>(e.getValue()));
        }
        return out;
    }

    void clientQuotas(String clientId) throws Exception {
        org.apache.kafka.common.quota.ClientQuotaEntity entity =
                new org.apache.kafka.common.quota.ClientQuotaEntity(Map.of(
                        org.apache.kafka.common.quota.ClientQuotaEntity.CLIENT_ID, clientId));
        Map<String, String> defaultName = new HashMap<>();
        defaultName.put(org.apache.kafka.common.quota.ClientQuotaEntity.CLIENT_ID, null);
        org.apache.kafka.common.quota.ClientQuotaEntity defaultEntity =
                new org.apache.kafka.common.quota.ClientQuotaEntity(defaultName);
        try (Admin admin = admin()) {
            get(admin.alterClientQuotas(List.of(
                    new org.apache.kafka.common.quota.ClientQuotaAlteration(entity, List.of(
                            new org.apache.kafka.common.quota.ClientQuotaAlteration.Op(
                                    "producer_byte_rate", 1048576.0),
                            new org.apache.kafka.common.quota.ClientQuotaAlteration.Op(
                                    "consumer_byte_rate", 2097152.0))),
                    new org.apache.kafka.common.quota.ClientQuotaAlteration(defaultEntity, List.of(
                            new org.apache.kafka.common.quota.ClientQuotaAlteration.Op(
                                    "controller_mutation_rate", 5.0))))).all());
            summary.put("exact", describedQuotas(admin, org.apache.kafka.common.quota.ClientQuotaFilter.containsOnly(
                    List.of(org.apache.kafka.common.quota.ClientQuotaFilterComponent.ofEntity(
                            org.apache.kafka.common.quota.ClientQuotaEntity.CLIENT_ID, clientId)))));
            summary.put("default", describedQuotas(admin, org.apache.kafka.common.quota.ClientQuotaFilter.containsOnly(
                    List.of(org.apache.kafka.common.quota.ClientQuotaFilterComponent.ofDefaultEntity(
                            org.apache.kafka.common.quota.ClientQuotaEntity.CLIENT_ID)))));
            summary.put("all", describedQuotas(admin, org.apache.kafka.common.quota.ClientQuotaFilter.all()));
            org.apache.kafka.common.quota.ClientQuotaEntity user =
                    new org.apache.kafka.common.quota.ClientQuotaEntity(Map.of(
                            org.apache.kafka.common.quota.ClientQuotaEntity.USER, "alice",
                            org.apache.kafka.common.quota.ClientQuotaEntity.CLIENT_ID, clientId));
            try {
                get(admin.alterClientQuotas(List.of(
                        new org.apache.kafka.common.quota.ClientQuotaAlteration(user, List.of(
                                new org.apache.kafka.common.quota.ClientQuotaAlteration.Op(
                                        "producer_byte_rate", 1024.0))))).all());
                summary.put("user_error", "none");
            } catch (ExecutionException e) {
                summary.put("user_error", e.getCause().getClass().getSimpleName());
            }
            // the user's entity: the client id's entries of entities naming user alice
            summary.put("user", describedQuotas(admin, org.apache.kafka.common.quota.ClientQuotaFilter.contains(
                    List.of(org.apache.kafka.common.quota.ClientQuotaFilterComponent.ofEntity(
                            org.apache.kafka.common.quota.ClientQuotaEntity.USER, "alice")))));
            get(admin.alterClientQuotas(List.of(
                    new org.apache.kafka.common.quota.ClientQuotaAlteration(user, List.of(
                            new org.apache.kafka.common.quota.ClientQuotaAlteration.Op(
                                    "producer_byte_rate", null))))).all());
            get(admin.alterClientQuotas(List.of(
                    new org.apache.kafka.common.quota.ClientQuotaAlteration(entity, List.of(
                            new org.apache.kafka.common.quota.ClientQuotaAlteration.Op(
                                    "producer_byte_rate", null),
                            new org.apache.kafka.common.quota.ClientQuotaAlteration.Op(
                                    "consumer_byte_rate", null))))).all());
            summary.put("after_removal", describedQuotas(admin, org.apache.kafka.common.quota.ClientQuotaFilter.all()));
        }
    }

    void mutationQuota(int count, int partitions) throws Exception {
        try (Admin admin = admin()) {
            List<NewTopic> topics = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                topics.add(new NewTopic(topic + "-" + i, partitions, (short) 1));
            }
            org.apache.kafka.clients.admin.CreateTopicsResult created = admin.createTopics(topics,
                    new org.apache.kafka.clients.admin.CreateTopicsOptions().retryOnQuotaViolation(false));
            Map<String, Object> outcome = new TreeMap<>();
            for (Map.Entry<String, org.apache.kafka.common.KafkaFuture<Void>> e : created.values().entrySet()) {
                try {
                    e.getValue().get(FUTURE_TIMEOUT_S, TimeUnit.SECONDS);
                    outcome.put(e.getKey(), "ok");
                } catch (ExecutionException ex) {
                    Throwable cause = ex.getCause();
                    outcome.put(e.getKey(), cause.getClass().getSimpleName());
                    if (cause instanceof org.apache.kafka.common.errors.ThrottlingQuotaExceededException) {
                        summary.put("throttle_time_ms",
                                ((org.apache.kafka.common.errors.ThrottlingQuotaExceededException) cause)
                                    .throttleTimeMs());
                    }
                }
            }
            summary.put("created", outcome);
            long started = System.nanoTime();
            get(admin.createTopics(List.of(new NewTopic(topic + "-retried", partitions, (short) 1))).all());
            summary.put("retried_ms", (System.nanoTime() - started) / 1_000_000);
            Map<String, Object> deleted = new TreeMap<>();
            org.apache.kafka.clients.admin.DeleteTopicsResult result = admin.deleteTopics(
                    List.of(topic + "-0", topic + "-1"),
                    new org.apache.kafka.clients.admin.DeleteTopicsOptions().retryOnQuotaViolation(false));
            for (Map.Entry<String, org.apache.kafka.common.KafkaFuture<Void>> e
                    : result.topicNameValues().entrySet()) {
                try {
                    e.getValue().get(FUTURE_TIMEOUT_S, TimeUnit.SECONDS);
                    deleted.put(e.getKey(), "ok");
                } catch (ExecutionException ex) {
                    deleted.put(e.getKey(), ex.getCause().getClass().getSimpleName());
                }
            }
            summary.put("deleted", deleted);
        }
    }

    void authorizedOperations(String group) throws Exception {
        try (Admin admin = admin()) {
            for (boolean include : new boolean[] {true, false}) {
                String suffix = include ? "" : "_not_asked";
                TopicDescription td = get(admin.describeTopics(List.of(topic),
                        new org.apache.kafka.clients.admin.DescribeTopicsOptions()
                            .includeAuthorizedOperations(include))
                        .allTopicNames()).get(topic);
                summary.put("topic" + suffix, opNames(td.authorizedOperations()));
                summary.put("cluster" + suffix, opNames(get(admin.describeCluster(
                        new org.apache.kafka.clients.admin.DescribeClusterOptions()
                            .includeAuthorizedOperations(include))
                        .authorizedOperations())));
                org.apache.kafka.clients.admin.ConsumerGroupDescription gd = get(
                        admin.describeConsumerGroups(List.of(group),
                            new org.apache.kafka.clients.admin.DescribeConsumerGroupsOptions()
                                .includeAuthorizedOperations(include))
                        .all()).get(group);
                summary.put("group" + suffix, opNames(gd.authorizedOperations()));
            }
        }
    }

    // ---------------------------------------------------------------- ACLs

    /** Admin.createAcls, describeAcls and deleteAcls of ACLs for principal on the topic
     *  (literal, Read) and its prefix (prefixed, Write); then one the broker must refuse. */
    void acls(String principal) throws Exception {
        org.apache.kafka.common.resource.ResourcePattern literal =
                new org.apache.kafka.common.resource.ResourcePattern(
                        org.apache.kafka.common.resource.ResourceType.TOPIC, topic,
                        org.apache.kafka.common.resource.PatternType.LITERAL);
        org.apache.kafka.common.resource.ResourcePattern prefixed =
                new org.apache.kafka.common.resource.ResourcePattern(
                        org.apache.kafka.common.resource.ResourceType.TOPIC, topic + "-",
                        org.apache.kafka.common.resource.PatternType.PREFIXED);
        List<org.apache.kafka.common.acl.AclBinding> bindings = List.of(
                new org.apache.kafka.common.acl.AclBinding(literal,
                        new org.apache.kafka.common.acl.AccessControlEntry(principal, "*",
                                org.apache.kafka.common.acl.AclOperation.READ,
                                org.apache.kafka.common.acl.AclPermissionType.ALLOW)),
                new org.apache.kafka.common.acl.AclBinding(prefixed,
                        new org.apache.kafka.common.acl.AccessControlEntry(principal, "*",
                                org.apache.kafka.common.acl.AclOperation.WRITE,
                                org.apache.kafka.common.acl.AclPermissionType.DENY)));
        org.apache.kafka.common.acl.AclBindingFilter mine =
                new org.apache.kafka.common.acl.AclBindingFilter(
                        org.apache.kafka.common.resource.ResourcePatternFilter.ANY,
                        new org.apache.kafka.common.acl.AccessControlEntryFilter(principal, null,
                                org.apache.kafka.common.acl.AclOperation.ANY,
                                org.apache.kafka.common.acl.AclPermissionType.ANY));
        try (Admin admin = admin()) {
            get(admin.createAcls(bindings).all());
            List<String> described = new ArrayList<>();
            for (org.apache.kafka.common.acl.AclBinding b : get(admin.describeAcls(mine).values())) {
                described.add(b.pattern().patternType() + " " + b.pattern().name() + " "
                        + b.entry().operation() + " " + b.entry().permissionType());
            }
            described.sort(null);
            summary.put("described", described);
            // MATCH: the ACLs that apply to one topic name (the literal one does not)
            org.apache.kafka.common.acl.AclBindingFilter matching =
                    new org.apache.kafka.common.acl.AclBindingFilter(
                            new org.apache.kafka.common.resource.ResourcePatternFilter(
                                    org.apache.kafka.common.resource.ResourceType.TOPIC,
                                    topic + "-orders",
                                    org.apache.kafka.common.resource.PatternType.MATCH),
                            org.apache.kafka.common.acl.AccessControlEntryFilter.ANY);
            summary.put("matched", get(admin.describeAcls(matching).values()).size());
            summary.put("deleted", get(admin.deleteAcls(List.of(mine)).all()).size());
            summary.put("left", get(admin.describeAcls(mine).values()).size());
            try {
                get(admin.createAcls(List.of(new org.apache.kafka.common.acl.AclBinding(
                        new org.apache.kafka.common.resource.ResourcePattern(
                                org.apache.kafka.common.resource.ResourceType.CLUSTER, "other",
                                org.apache.kafka.common.resource.PatternType.LITERAL),
                        new org.apache.kafka.common.acl.AccessControlEntry(principal, "*",
                                org.apache.kafka.common.acl.AclOperation.ALTER,
                                org.apache.kafka.common.acl.AclPermissionType.ALLOW)))).all());
                summary.put("invalid", "accepted");
            } catch (ExecutionException e) {
                summary.put("invalid", e.getCause().getClass().getSimpleName());
            }
        }
    }

    // ---------------------------------------------------------------- broker configs

    void brokerConfigs(String brokerId, List<String> ops) throws Exception {
        ConfigResource res = new ConfigResource(ConfigResource.Type.BROKER, brokerId);
        try (Admin admin = admin()) {
            Config cfg = get(admin.describeConfigs(List.of(res),
                    new org.apache.kafka.clients.admin.DescribeConfigsOptions()
                        .includeSynonyms(true).includeDocumentation(true))
                    .all()).get(res);
            Map<String, Object> entries = new TreeMap<>();
            for (ConfigEntry e : cfg.entries()) {
                Map<String, Object> j = new LinkedHashMap<>();
                j.put("value", e.value());
                j.put("source", e.source().name());
                j.put("read_only", e.isReadOnly());
                j.put("sensitive", e.isSensitive());
                j.put("type", e.type().name());
                j.put("documented", e.documentation() != null && !e.documentation().isEmpty());
                List<Object> synonyms = new ArrayList<>();
                for (ConfigEntry.ConfigSynonym s : e.synonyms()) {
                    synonyms.add(Arrays.asList(s.name(), s.value(), s.source().name()));
                }
                j.put("synonyms", synonyms);
                entries.put(e.name(), j);
            }
            summary.put("configs", entries);
            Map<String, Object> altered = new LinkedHashMap<>();
            for (String op : ops) {
                org.apache.kafka.clients.admin.AlterConfigOp alter;
                String key;
                if (op.startsWith("set:") && op.indexOf('=') > 4) {
                    int eq = op.indexOf('=');
                    key = op.substring(4, eq);
                    alter = new org.apache.kafka.clients.admin.AlterConfigOp(
                        new ConfigEntry(key, op.substring(eq + 1)),
                        org.apache.kafka.clients.admin.AlterConfigOp.OpType.SET);
                } else if (op.startsWith("delete:")) {
                    key = op.substring(7);
                    alter = new org.apache.kafka.clients.admin.AlterConfigOp(
                        new ConfigEntry(key, null),
                        org.apache.kafka.clients.admin.AlterConfigOp.OpType.DELETE);
                } else {
                    usage("broker-configs: bad operation " + op);
                    return;
                }
                Map<String, Object> outcome = new LinkedHashMap<>();
                try {
                    get(admin.incrementalAlterConfigs(Map.of(res, List.of(alter))).all());
                    outcome.put("error", null);
                } catch (ExecutionException ex) {
                    Throwable cause = ex.getCause() != null ? ex.getCause() : ex;
                    outcome.put("error", cause.getClass().getSimpleName());
                    outcome.put("message", cause.getMessage());
                }
                altered.put(op, outcome);
            }
            summary.put("altered", altered);
        }
    }

    // ---------------------------------------------------------------- server mode

    /** Checks of the server mode itself (tests/interop/test_java_runner.py): {@code
     * sleep:<ms>} sleeps; {@code leftover:<ms>} leaves a thread behind that writes to
     * System.out and System.err every 10 ms for that long; {@code halt} ends the JVM as a
     * crash would (no reply). */
    void selftest(String what) throws Exception {
        if (what.startsWith("sleep:")) {
            Thread.sleep(Long.parseLong(what.substring(6)));
        } else if (what.startsWith("leftover:")) {
            long until = System.currentTimeMillis() + Long.parseLong(what.substring(9));
            Thread t = new Thread(() -> {
                while (System.currentTimeMillis() < until) {
                    System.out.println("leftover output");
                    System.err.println("leftover error");
                    try {
                        Thread.sleep(10);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
            }, "selftest-leftover");
            t.setDaemon(true);
            t.start();
        } else if (what.equals("halt")) {
            Runtime.getRuntime().halt(9);
        } else {
            usage("selftest needs sleep:<ms> | leftover:<ms> | halt");
        }
        summary.put("selftest", what);
    }

    /**
     * {@code OdradekInterop --serve <reply-file> <parent-pid>}: one JVM for many runs
     * (tests/interop/_broker.py's java_client(), issue 51). Each line of stdin is one
     * command line, its arguments base64 (UTF-8) separated by spaces; each is run as
     * {@code main} would run it, on a thread of a thread group of its own, and answered on
     * the reply file (a pipe the caller passes as /dev/fd/N) with frames of a kind byte,
     * a 4-byte big-endian length and as many bytes: 'O' stdout, 'E' stderr, as written,
     * then 'X' the exit code (ASCII) once the run returned. System.out and System.err
     * route a write to the run under way when the writing thread belongs to its group
     * (the run's thread and the threads of the clients it started); any other thread's
     * writes (a client's thread a failed run left behind) go to the JVM's own stderr,
     * marked, never into a later run's output. A usage error is exit code 2, not an exit
     * of the JVM. The server exits once stdin ends (or its parent process is gone).
     */
    static final class Server {
        final OutputStream reply;
        final PrintStream log;
        volatile ThreadGroup current;

        Server(OutputStream reply, PrintStream log) {
            this.reply = reply;
            this.log = log;
        }

        static void serve(String replyFile, long parentPid) throws Exception {
            Server server = new Server(new FileOutputStream(replyFile), System.err);
            java.io.BufferedReader requests = new java.io.BufferedReader(
                    new java.io.InputStreamReader(System.in, StandardCharsets.UTF_8));
            System.setIn(new java.io.ByteArrayInputStream(new byte[0]));
            System.setOut(new PrintStream(server.new Route((byte) 'O'), true, StandardCharsets.UTF_8));
            System.setErr(new PrintStream(server.new Route((byte) 'E'), true, StandardCharsets.UTF_8));
            Thread watch = new Thread(() -> {
                // its parent gone, the JVM is another process's child at once (a dead parent
                // not yet reaped still counts as alive for ProcessHandle)
                while (ProcessHandle.current().parent().map(ProcessHandle::pid).orElse(-1L)
                        == parentPid) {
                    try {
                        Thread.sleep(2000);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
                System.exit(0);
            }, "parent-watch");
            watch.setDaemon(true);
            watch.start();
            int n = 0;
            String line;
            while ((line = requests.readLine()) != null) {
                String[] argv = line.isEmpty() ? new String[0] : line.split(" ", -1);
                for (int i = 0; i < argv.length; i++) {
                    argv[i] = new String(java.util.Base64.getDecoder().decode(argv[i]),
                            StandardCharsets.UTF_8);
                }
                n++;
                ThreadGroup group = new ThreadGroup("run-" + n);
                int[] rc = {3};
                Thread run = new Thread(group, () -> {
                    try {
                        rc[0] = run(argv);
                    } catch (Throwable t) {
                        System.err.println("OdradekInterop: unexpected exception");
                        t.printStackTrace();
                    }
                }, "run-" + n);
                server.current = group;
                run.start();
                run.join();
                server.finish(rc[0]);
            }
            System.exit(0);
        }

        /** A write to System.out ('O') or System.err ('E'). */
        final class Route extends OutputStream {
            final byte kind;

            Route(byte kind) {
                this.kind = kind;
            }

            @Override
            public void write(int b) throws java.io.IOException {
                write(new byte[] {(byte) b}, 0, 1);
            }

            @Override
            public void write(byte[] b, int off, int len) throws java.io.IOException {
                emit(kind, b, off, len);
            }
        }

        synchronized void emit(byte kind, byte[] b, int off, int len) throws java.io.IOException {
            ThreadGroup group = current;
            ThreadGroup mine = Thread.currentThread().getThreadGroup();
            if (group != null && mine != null && group.parentOf(mine)) {
                frame(kind, b, off, len);
            } else {
                log.print("[OdradekInterop server: not a run's output, thread "
                        + Thread.currentThread().getName() + "] ");
                log.write(b, off, len);
                log.flush();
            }
        }

        synchronized void finish(int rc) throws java.io.IOException {
            current = null;
            byte[] code = Integer.toString(rc).getBytes(StandardCharsets.US_ASCII);
            frame((byte) 'X', code, 0, code.length);
        }

        void frame(byte kind, byte[] b, int off, int len) throws java.io.IOException {
            byte[] head = {kind, (byte) (len >>> 24), (byte) (len >>> 16), (byte) (len >>> 8), (byte) len};
            reply.write(head);
            reply.write(b, off, len);
            reply.flush();
        }
    }

    // ---------------------------------------------------------------- tiny JSON writer

    static final class Json {
        static String write(Object o) {
            StringBuilder sb = new StringBuilder();
            write(sb, o);
            return sb.toString();
        }

        static void write(StringBuilder sb, Object o) {
            if (o == null) {
                sb.append("null");
            } else if (o instanceof String) {
                string(sb, (String) o);
            } else if (o instanceof Number || o instanceof Boolean) {
                sb.append(o);
            } else if (o instanceof Map) {
                sb.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> e : ((Map<?, ?>) o).entrySet()) {
                    if (!first) {
                        sb.append(',');
                    }
                    first = false;
                    string(sb, String.valueOf(e.getKey()));
                    sb.append(':');
                    write(sb, e.getValue());
                }
                sb.append('}');
            } else if (o instanceof Collection) {
                sb.append('[');
                boolean first = true;
                for (Object x : (Collection<?>) o) {
                    if (!first) {
                        sb.append(',');
                    }
                    first = false;
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
                switch (c) {
                    case '"': sb.append("\\\""); break;
                    case '\\': sb.append("\\\\"); break;
                    case '\n': sb.append("\\n"); break;
                    case '\r': sb.append("\\r"); break;
                    case '\t': sb.append("\\t"); break;
                    default:
                        if (c < 0x20) {
                            sb.append(String.format("\\u%04x", (int) c));
                        } else {
                            sb.append(c);
                        }
                }
            }
            sb.append('"');
        }
    }
}
