package effectivelyonce.inventory;

import java.net.URI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

/**
 * The process's settings, from the same environment variables as the Python runtime's
 * (effectively_once/consumer/wiring.py ConsumerSettings; docs/consumer-process-contract.md). Every value is
 * checked at start: a bad one stops the process with the variable named.
 */
public record ConsumerSettings(
    String jdbcUrl,
    String databaseUser,
    String databasePassword,
    String bootstrapServers,
    String consumerName,
    String consumerGroup,
    List<String> topics,
    String deadLetterTopic,
    IsolationLevel isolationLevel,
    double dedupHorizonDays,
    String controlHost,
    Integer controlPort,
    String processName,
    String faults,
    Set<String> allowedHosts,
    int members,
    String instanceId,
    String logLevel,
    String telemetryTopic,
    String groupProtocol) {

  public static final String DEFAULT_CONSUMER_NAME = "inventory-reservation-v1";
  public static final List<String> DEFAULT_TOPICS = List.of("orders.events", "payment.events");

  private static final Pattern NAME = Pattern.compile("^[A-Za-z0-9._-]+$");
  private static final Pattern TOPICS = Pattern.compile("^[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)*$");

  public enum IsolationLevel {
    READ_COMMITTED("READ COMMITTED", java.sql.Connection.TRANSACTION_READ_COMMITTED),
    REPEATABLE_READ("REPEATABLE READ", java.sql.Connection.TRANSACTION_REPEATABLE_READ),
    SERIALIZABLE("SERIALIZABLE", java.sql.Connection.TRANSACTION_SERIALIZABLE);

    public final String sql;
    public final int jdbc;

    IsolationLevel(String sql, int jdbc) {
      this.sql = sql;
      this.jdbc = jdbc;
    }
  }

  /** A setting that does not fit: the message names the variable. */
  public static final class SettingsError extends RuntimeException {
    public SettingsError(String message) {
      super(message);
    }
  }

  public static ConsumerSettings fromEnvironment(Map<String, String> env) {
    String databaseUrl = env.getOrDefault("DATABASE_URL", "");
    if (databaseUrl.isBlank()) {
      throw new SettingsError("DATABASE_URL: required (a postgresql:// URL)");
    }
    String servers = env.getOrDefault("KAFKA_BOOTSTRAP_SERVERS", "").trim();
    if (servers.isEmpty()) {
      throw new SettingsError("KAFKA_BOOTSTRAP_SERVERS: required (host:port, comma-separated)");
    }
    String level = blankToNull(env.get("CONSUMER_ISOLATION_LEVEL"));
    IsolationLevel isolation = IsolationLevel.READ_COMMITTED;
    if (level != null) {
      isolation = Arrays.stream(IsolationLevel.values()).filter(l -> l.sql.equals(level)).findFirst()
          .orElseThrow(() -> new SettingsError(
              "CONSUMER_ISOLATION_LEVEL: one of READ COMMITTED, REPEATABLE READ, SERIALIZABLE"));
    }
    String strategy = blankToNull(env.get("CONSUMER_STRATEGY"));
    if (strategy != null && !strategy.equals("correct")) {
      throw new SettingsError("CONSUMER_STRATEGY: this implementation runs the correct path only, not '"
          + shorten(strategy) + "'");
    }
    String topics = blankToNull(env.get("CONSUMER_TOPICS"));
    if (topics != null && !TOPICS.matcher(topics).matches()) {
      throw new SettingsError("CONSUMER_TOPICS: topic names, comma-separated");
    }
    String port = blankToNull(env.get("CONTROL_PORT"));
    Integer controlPort = port == null ? null : integer("CONTROL_PORT", port, 1, 65535);
    String horizon = blankToNull(env.get("DEDUP_HORIZON_DAYS"));
    String members = blankToNull(env.get("CONSUMER_MEMBERS"));
    String instance = blankToNull(env.get("EO_INSTANCE_ID"));
    URI url = parseUrl(databaseUrl);
    String[] credentials = url.getRawUserInfo() == null ? new String[0] : url.getRawUserInfo().split(":", 2);
    String query = jdbcQuery(url.getRawQuery());
    String host = url.getHost() + (url.getPort() > 0 ? ":" + url.getPort() : "");
    return new ConsumerSettings(
        "jdbc:postgresql://" + host + url.getRawPath() + query,
        credentials.length > 0 ? decode(credentials[0]) : null,
        credentials.length > 1 ? decode(credentials[1]) : null,
        servers,
        name(env, "CONSUMER_NAME", 200),
        name(env, "CONSUMER_GROUP", 200),
        topics == null ? null : List.of(topics.split(",")),
        name(env, "DEAD_LETTER_TOPIC", 249),
        isolation,
        horizon == null ? 30 : number("DEDUP_HORIZON_DAYS", horizon, 0.000001, 3650),
        env.getOrDefault("CONTROL_HOST", "127.0.0.1").isBlank() ? "127.0.0.1" : env.get("CONTROL_HOST"),
        controlPort,
        blankToNull(env.get("EO_PROCESS_NAME")),
        env.getOrDefault("EO_FAULTS", ""),
        Arrays.stream(env.getOrDefault("ALLOWED_HOSTS", "").split(","))
            .map(h -> h.trim().toLowerCase(Locale.ROOT)).filter(h -> !h.isEmpty()).collect(Collectors.toSet()),
        members == null ? 1 : integer("CONSUMER_MEMBERS", members, 1, 16),
        instance == null ? null : instance.replace("{hostname}", hostname()),
        logLevel(blankToNull(env.get("LOG_LEVEL"))),
        env.getOrDefault("TELEMETRY_TOPIC", "platform.telemetry").trim(),
        groupProtocol(blankToNull(env.get("CONSUMER_GROUP_PROTOCOL"))));
  }

  /** CONSUMER_GROUP_PROTOCOL: consumer (KIP-848, the default) or classic, as the Python runtime reads it. */
  private static String groupProtocol(String protocol) {
    if (protocol == null || protocol.equals("classic") || protocol.equals("consumer")) {
      return protocol == null ? "consumer" : protocol;
    }
    throw new SettingsError("CONSUMER_GROUP_PROTOCOL: classic or consumer, not '" + shorten(protocol) + "'");
  }

  /** LOG_LEVEL's names (DEBUG, INFO, WARNING, ERROR, CRITICAL) as Spring Boot's logging reads them. */
  private static String logLevel(String level) {
    if (level == null) {
      return "INFO";
    }
    return switch (level) {
      case "DEBUG", "INFO", "ERROR" -> level;
      case "WARNING" -> "WARN";
      case "CRITICAL" -> "ERROR";
      default -> throw new SettingsError("LOG_LEVEL: one of DEBUG, INFO, WARNING, ERROR, CRITICAL");
    };
  }

  private static String hostname() {
    try {
      return java.net.InetAddress.getLocalHost().getHostName();
    } catch (java.net.UnknownHostException unknown) {
      return "localhost";
    }
  }

  public String effectiveConsumerName() {
    return consumerName != null ? consumerName : DEFAULT_CONSUMER_NAME;
  }

  public String effectiveGroup() {
    return consumerGroup != null ? consumerGroup : effectiveConsumerName();
  }

  public List<String> effectiveTopics() {
    return topics != null ? topics : DEFAULT_TOPICS;
  }

  public String effectiveDeadLetterTopic() {
    return deadLetterTopic != null ? deadLetterTopic : "dlq." + effectiveConsumerName();
  }

  /** Also the database sessions' application_name: how an observer finds this process's backend. */
  public String effectiveProcessName() {
    String name = processName != null ? processName : effectiveConsumerName();
    return name.length() > 63 ? name.substring(0, 63) : name;
  }

  /**
   * The URL's query for JDBC: without `host`, which in a libpq URL names a unix socket directory
   * (the launcher's server gives one): JDBC reaches PostgreSQL over TCP only, at the URL's address.
   */
  static String jdbcQuery(String rawQuery) {
    if (rawQuery == null) {
      return "";
    }
    String kept = Arrays.stream(rawQuery.split("&"))
        .filter(parameter -> !parameter.equals("host") && !parameter.startsWith("host="))
        .collect(Collectors.joining("&"));
    return kept.isEmpty() ? "" : "?" + kept;
  }

  private static URI parseUrl(String databaseUrl) {
    try {
      URI url = URI.create(databaseUrl);
      if (!"postgresql".equals(url.getScheme()) && !"postgres".equals(url.getScheme()) || url.getHost() == null) {
        throw new IllegalArgumentException("not a postgresql:// URL");
      }
      return url;
    } catch (IllegalArgumentException error) {
      throw new SettingsError("DATABASE_URL: a postgresql://user:password@host:port/database URL");
    }
  }

  private static String decode(String text) {
    return URLDecoder.decode(text, StandardCharsets.UTF_8);
  }

  private static String name(Map<String, String> env, String variable, int most) {
    String value = blankToNull(env.get(variable));
    if (value != null && (value.length() > most || !NAME.matcher(value).matches())) {
      throw new SettingsError(variable + ": 1-" + most + " letters, digits, '.', '_' or '-'");
    }
    return value;
  }

  private static int integer(String variable, String raw, int low, int high) {
    try {
      int value = Integer.parseInt(raw.strip());
      if (value >= low && value <= high) {
        return value;
      }
    } catch (NumberFormatException ignored) {
      // refused below
    }
    throw new SettingsError(variable + ": a whole number from " + low + " to " + high + ", not '" + shorten(raw) + "'");
  }

  private static double number(String variable, String raw, double low, double high) {
    try {
      double value = Double.parseDouble(raw);
      if (Double.isFinite(value) && value >= low && value <= high) {
        return value;
      }
    } catch (NumberFormatException ignored) {
      // refused below
    }
    throw new SettingsError(variable + ": a number from " + low + " to " + high + ", not '" + shorten(raw) + "'");
  }

  private static String blankToNull(String value) {
    return value == null || value.isBlank() ? null : value;
  }

  private static String shorten(String value) {
    return value.length() <= 40 ? value : value.substring(0, 40) + "…";
  }
}
