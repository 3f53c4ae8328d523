// The Apache Kafka Java client's partition for a keyed record, for tests/client/test_partitioner.py.
//
// Usage: java -cp kafka-clients.jar:slf4j-api.jar KeyPartitions.java <partitions>... < keys
//
// Reads one key per line from stdin, as hex (an empty line is the empty key). For each key
// prints one line: Utils.murmur2(key), then BuiltInPartitioner.partitionForKey(key, n) for
// each partition count n given as an argument, separated by spaces. partitionForKey is what
// KafkaProducer uses for a record with a key and no explicit partition or partitioner.
// Exit codes: 0 ok, 2 usage error (bad argument or bad hex).

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;

import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.apache.kafka.common.utils.Utils;

public final class KeyPartitions {
    static byte[] parseHex(String hex) {
        if (hex.length() % 2 != 0) {
            throw new IllegalArgumentException("odd-length hex: " + hex);
        }
        byte[] out = new byte[hex.length() / 2];
        for (int i = 0; i < out.length; i++) {
            int hi = Character.digit(hex.charAt(2 * i), 16);
            int lo = Character.digit(hex.charAt(2 * i + 1), 16);
            if (hi < 0 || lo < 0) {
                throw new IllegalArgumentException("not hex: " + hex);
            }
            out[i] = (byte) (hi << 4 | lo);
        }
        return out;
    }

    public static void main(String[] args) throws IOException {
        int[] counts = new int[args.length];
        try {
            for (int i = 0; i < args.length; i++) {
                counts[i] = Integer.parseInt(args[i]);
                if (counts[i] < 1) {
                    throw new NumberFormatException("partition count below 1: " + args[i]);
                }
            }
        } catch (NumberFormatException e) {
            System.err.println("KeyPartitions: " + e.getMessage());
            System.exit(2);
        }
        BufferedReader in = new BufferedReader(
            new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        StringBuilder out = new StringBuilder();
        String line;
        while ((line = in.readLine()) != null) {
            byte[] key;
            try {
                key = parseHex(line.strip());
            } catch (IllegalArgumentException e) {
                System.err.println("KeyPartitions: " + e.getMessage());
                System.exit(2);
                return;
            }
            out.append(Utils.murmur2(key));
            for (int n : counts) {
                out.append(' ').append(BuiltInPartitioner.partitionForKey(key, n));
            }
            out.append('\n');
        }
        System.out.print(out);
        System.out.flush();
    }
}
