// Kafka's encoded password form made and opened with the JVM's own JCE (javax.crypto), to
// check that Odradek's encoder (odradek.security.password_encoder) agrees with Java's
// PBKDF2, AES and base64. Written for the test; run as a single-file program:
//   java JcePasswordEncoding.java encode <secret> <password> <keyFactory> <cipher> <bits> <iterations>
//   java JcePasswordEncoding.java decode <secret> <encoded>
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.Map;
import javax.crypto.Cipher;
import javax.crypto.SecretKeyFactory;
import javax.crypto.spec.GCMParameterSpec;
import javax.crypto.spec.IvParameterSpec;
import javax.crypto.spec.PBEKeySpec;
import javax.crypto.spec.SecretKeySpec;

public class JcePasswordEncoding {
    static SecretKeySpec key(String secret, String factory, byte[] salt, int iterations, int bits)
            throws Exception {
        PBEKeySpec spec = new PBEKeySpec(secret.toCharArray(), salt, iterations, bits);
        byte[] raw = SecretKeyFactory.getInstance(factory).generateSecret(spec).getEncoded();
        return new SecretKeySpec(raw, "AES");
    }

    public static void main(String[] args) throws Exception {
        Base64.Encoder b64 = Base64.getEncoder();
        Base64.Decoder unb64 = Base64.getDecoder();
        if (args[0].equals("encode")) {
            String secret = args[1], password = args[2], factory = args[3], cipherName = args[4];
            int bits = Integer.parseInt(args[5]), iterations = Integer.parseInt(args[6]);
            byte[] salt = new byte[256];
            new SecureRandom().nextBytes(salt);
            Cipher cipher = Cipher.getInstance(cipherName);
            cipher.init(Cipher.ENCRYPT_MODE, key(secret, factory, salt, iterations, bits));
            byte[] encrypted = cipher.doFinal(password.getBytes(StandardCharsets.UTF_8));
            Map<String, String> out = new LinkedHashMap<>();
            out.put("keyFactoryAlgorithm", factory);
            out.put("cipherAlgorithm", cipherName);
            out.put("keyLength", String.valueOf(bits));
            out.put("salt", b64.encodeToString(salt));
            out.put("iterations", String.valueOf(iterations));
            out.put("encryptedPassword", b64.encodeToString(encrypted));
            out.put("passwordLength", String.valueOf(password.length()));
            if (cipherName.startsWith("AES/GCM/")) {
                GCMParameterSpec gcm = cipher.getParameters().getParameterSpec(GCMParameterSpec.class);
                out.put("initializationVector", b64.encodeToString(gcm.getIV()));
                out.put("authenticationTagLength", String.valueOf(gcm.getTLen()));
            } else {
                IvParameterSpec iv = cipher.getParameters().getParameterSpec(IvParameterSpec.class);
                out.put("initializationVector", b64.encodeToString(iv.getIV()));
            }
            StringBuilder text = new StringBuilder();
            for (Map.Entry<String, String> e : out.entrySet()) {
                if (text.length() > 0) text.append(',');
                text.append(e.getKey()).append(':').append(e.getValue());
            }
            System.out.print(text);
        } else {
            Map<String, String> in = new LinkedHashMap<>();
            for (String item : args[2].split(",")) {
                int at = item.lastIndexOf(':');
                in.put(item.substring(0, at), item.substring(at + 1));
            }
            String cipherName = in.get("cipherAlgorithm");
            SecretKeySpec k = key(args[1], in.get("keyFactoryAlgorithm"),
                unb64.decode(in.get("salt")), Integer.parseInt(in.get("iterations")),
                Integer.parseInt(in.get("keyLength")));
            byte[] iv = unb64.decode(in.get("initializationVector"));
            Cipher cipher = Cipher.getInstance(cipherName);
            if (cipherName.startsWith("AES/GCM/"))
                cipher.init(Cipher.DECRYPT_MODE, k,
                    new GCMParameterSpec(Integer.parseInt(in.get("authenticationTagLength")), iv));
            else
                cipher.init(Cipher.DECRYPT_MODE, k, new IvParameterSpec(iv));
            String password = new String(cipher.doFinal(unb64.decode(in.get("encryptedPassword"))),
                                         StandardCharsets.UTF_8);
            if (password.length() != Integer.parseInt(in.get("passwordLength")))
                throw new IllegalStateException("length check failed");
            System.out.print(password);
        }
    }
}
