// The Java client's side of bench/transactions_java.py (kafka-clients 3.9.1).
//
// Usage: TxnBench <bootstrap> <record bytes> <records per transaction> <linger.ms>
//
// Reads commands from stdin, one a line, and answers each on stdout:
//   run plain|txn|txn-flush <topic> <records>
//       builds a producer (acks=all, enable.idempotence=true, linger.ms as given (the
//       bench's default 5), batch.size=262144; txn: a fresh transactional.id too), waits until it knows the
//       topic's partitions (and, txn, initTransactions), prints "ready" and waits for a
//       "go" line (the caller reads the broker's CPU time in between); then starts the
//       clock, sends <records> records (txn: beginTransaction, <records per transaction>
//       sends, commitTransaction, again), waits for every acknowledgement (flush), stops
//       the clock and prints one line:
//         done <nanoseconds> <transactions> <produce loop ns, median> <commit ns, median>
//              <produce loop ns, total> <commit ns, total> <commit ns, max>
//              <flush ns, median> <flush ns, total>
//       (the produce loop is beginTransaction and the sends, the commit is
//       commitTransaction: its flush, EndTxn; zeros for plain). txn-flush is txn with an
//       explicit producer.flush() before each commitTransaction, timed apart (and counted
//       in the commit): the commit's Produce apart from its EndTxn. The producer is closed
//       after the line, outside the clock.
//   quit
// A failed send or commit ends the program with exit code 3 and the error on stderr.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class TxnBench {
    private final String bootstrap;
    private final byte[] value;
    private final int perTxn;
    private final String lingerMs;
    private final BufferedReader in;

    private TxnBench(String bootstrap, int size, int perTxn, String lingerMs) {
        this.bootstrap = bootstrap;
        this.value = new byte[size];
        Arrays.fill(this.value, (byte) 'x');
        this.perTxn = perTxn;
        this.lingerMs = lingerMs;
        this.in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 4) {
            System.err.println(
                "usage: TxnBench <bootstrap> <record bytes> <records per transaction> <linger.ms>");
            System.exit(2);
        }
        TxnBench bench = new TxnBench(args[0], Integer.parseInt(args[1]), Integer.parseInt(args[2]),
            args[3]);
        try {
            bench.serve();
        } catch (Exception e) {
            e.printStackTrace();
            System.exit(3);
        }
    }

    private void serve() throws Exception {
        String line;
        while ((line = in.readLine()) != null) {
            String[] words = line.trim().split(" ");
            if (words[0].equals("quit")) {
                return;
            } else if (words[0].equals("run") && words.length == 4) {
                System.out.println(run(!words[1].equals("plain"), words[1].equals("txn-flush"),
                    words[2], Long.parseLong(words[3])));
                System.out.flush();
            } else {
                throw new IllegalArgumentException("unknown command: " + line);
            }
        }
    }

    private Properties config(boolean transactional) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.LINGER_MS_CONFIG, lingerMs);
        props.put(ProducerConfig.BATCH_SIZE_CONFIG, "262144");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        if (transactional) {
            props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "bench-java-" + UUID.randomUUID());
        }
        return props;
    }

    private String run(boolean transactional, boolean split, String topic, long records)
            throws Exception {
        AtomicLong failed = new AtomicLong();
        AtomicReference<Exception> firstError = new AtomicReference<>();
        Callback callback = (metadata, exception) -> {
            if (exception != null) {
                failed.incrementAndGet();
                firstError.compareAndSet(null, exception);
            }
        };
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(config(transactional))) {
            producer.partitionsFor(topic);  // connected, the topic's leaders known
            if (transactional) {
                producer.initTransactions();
            }
            System.out.println("ready");
            System.out.flush();
            String go = in.readLine();
            if (go == null || !go.trim().equals("go")) {
                throw new IllegalStateException("expected go, got " + go);
            }
            int transactions = transactional ? (int) ((records + perTxn - 1) / perTxn) : 0;
            long[] loops = new long[transactions];
            long[] commits = new long[transactions];
            long[] flushes = new long[transactions];
            long started = System.nanoTime();
            if (transactional) {
                long sent = 0;
                for (int t = 0; t < transactions; t++) {
                    long loopStart = System.nanoTime();
                    producer.beginTransaction();
                    long end = Math.min(records, sent + perTxn);
                    for (; sent < end; sent++) {
                        producer.send(new ProducerRecord<>(topic, value), callback);
                    }
                    long commitStart = System.nanoTime();
                    if (split) {
                        producer.flush();
                        flushes[t] = System.nanoTime() - commitStart;
                    }
                    producer.commitTransaction();
                    long commitEnd = System.nanoTime();
                    loops[t] = commitStart - loopStart;
                    commits[t] = commitEnd - commitStart;
                }
            } else {
                for (long i = 0; i < records; i++) {
                    producer.send(new ProducerRecord<>(topic, value), callback);
                }
            }
            producer.flush();
            long elapsed = System.nanoTime() - started;
            if (failed.get() > 0) {
                throw new IllegalStateException(failed.get() + " sends failed", firstError.get());
            }
            long loopTotal = Arrays.stream(loops).sum();
            long commitTotal = Arrays.stream(commits).sum();
            long commitMax = Arrays.stream(commits).max().orElse(0);
            return String.format("done %d %d %d %d %d %d %d %d %d", elapsed, transactions,
                median(loops), median(commits), loopTotal, commitTotal, commitMax,
                median(flushes), Arrays.stream(flushes).sum());
        }
    }

    private static long median(long[] values) {
        if (values.length == 0) {
            return 0;
        }
        long[] sorted = values.clone();
        Arrays.sort(sorted);
        return sorted[sorted.length / 2];
    }
}
