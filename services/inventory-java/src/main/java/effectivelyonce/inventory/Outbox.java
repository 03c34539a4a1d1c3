package effectivelyonce.inventory;

import java.util.Map;
import org.springframework.jdbc.core.JdbcTemplate;

/**
 * The outbox writer: an event is added inside the caller's open transaction, so it exists only if
 * the business change commits. The relay publishes it later under the same message id.
 */
public final class Outbox {
  private static final String INSERT = """
      INSERT INTO outbox (message_id, aggregate_type, aggregate_key, event_type, event_version, topic,
                          payload, headers, created_at)
      VALUES (?, 'order', ?, ?, ?, ?, ?::jsonb, ?::jsonb, ?::timestamptz)""";

  private Outbox() {}

  public static void add(JdbcTemplate transaction, Envelope event, String topic) {
    Map<String, Object> headers = event.traceId() == null ? Map.of() : Map.of("trace_id", event.traceId());
    transaction.update(INSERT, event.messageId(), event.key(), event.type(), event.version(), topic,
        Envelope.JSON.writeValueAsString(event.payload()), Envelope.JSON.writeValueAsString(headers),
        event.occurredAt());
  }
}
