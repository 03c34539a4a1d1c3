package effectivelyonce.inventory;

import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * The Kafka principal the process authenticates as: KAFKA_USERNAME and KAFKA_PASSWORD, with
 * KAFKA_SASL_MECHANISM (default SCRAM-SHA-512) and KAFKA_SECURITY_PROTOCOL (default SASL_PLAINTEXT),
 * read as the Python runtime's effectively_once/kafka_client.py reads them.
 */
public record KafkaPrincipal(String username, String password, String mechanism, String protocol) {

  private static final List<String> MECHANISMS = List.of("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN");
  private static final List<String> PROTOCOLS = List.of("SASL_PLAINTEXT", "SASL_SSL");

  @Override
  public String toString() {
    return "KafkaPrincipal[" + username + ", " + mechanism + ", " + protocol + "]";
  }

  /** The principal the environment names, empty when it names none. */
  public static Optional<KafkaPrincipal> fromEnvironment(Map<String, String> env) {
    String username = env.getOrDefault("KAFKA_USERNAME", "");
    String password = env.getOrDefault("KAFKA_PASSWORD", "");
    if (username.isEmpty() && password.isEmpty()) {
      return Optional.empty();
    }
    if (username.isEmpty() || password.isEmpty()) {
      throw new ConsumerSettings.SettingsError("KAFKA_USERNAME and KAFKA_PASSWORD: both are needed, or neither");
    }
    String mechanism = orDefault(env.get("KAFKA_SASL_MECHANISM"), "SCRAM-SHA-512");
    if (!MECHANISMS.contains(mechanism)) {
      throw new ConsumerSettings.SettingsError("KAFKA_SASL_MECHANISM: one of " + String.join(", ", MECHANISMS));
    }
    String protocol = orDefault(env.get("KAFKA_SECURITY_PROTOCOL"), "SASL_PLAINTEXT");
    if (!PROTOCOLS.contains(protocol)) {
      throw new ConsumerSettings.SettingsError("KAFKA_SECURITY_PROTOCOL: one of " + String.join(", ", PROTOCOLS));
    }
    return Optional.of(new KafkaPrincipal(username, password, mechanism, protocol));
  }

  /** Spring Boot's properties for every Kafka client it builds (consumers and producers). */
  public Map<String, Object> springProperties() {
    String module = mechanism.equals("PLAIN")
        ? "org.apache.kafka.common.security.plain.PlainLoginModule"
        : "org.apache.kafka.common.security.scram.ScramLoginModule";
    return Map.of(
        "spring.kafka.security.protocol", protocol,
        "spring.kafka.properties.sasl.mechanism", mechanism,
        "spring.kafka.properties.sasl.jaas.config",
        module + " required username=\"" + quoted(username) + "\" password=\"" + quoted(password) + "\";");
  }

  private static String quoted(String value) {
    return value.replace("\\", "\\\\").replace("\"", "\\\"");
  }

  private static String orDefault(String value, String fallback) {
    return value == null || value.isBlank() ? fallback : value;
  }
}
