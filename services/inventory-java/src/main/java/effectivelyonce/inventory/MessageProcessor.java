package effectivelyonce.inventory;

import effectivelyonce.inventory.DeadLetters.TerminalFailure;
import java.sql.SQLException;
import java.time.Duration;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ThreadLocalRandom;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.dao.DataAccessException;
import org.springframework.dao.DataAccessResourceFailureException;
import org.springframework.stereotype.Component;
import org.springframework.transaction.CannotCreateTransactionException;

/**
 * Around the correct path: which messages it may take, retries, and what became of each. It
 * knows nothing of Kafka.
 *
 * SQLSTATE 40001 and 40P01 retry the whole transaction under the same message id (at most 8
 * attempts, full-jitter backoff); any other handler error is tried 3 times; a NonRetryable error,
 * a handler that ended the transaction, an unknown type or a message older than the dedup horizon
 * is a TerminalFailure (dead-lettered by the listener), unless the message's marker is committed
 * already: a copy of an applied message is a duplicate whatever it carries. A lost database
 * session is RetryLater (nothing acknowledged, the same message again).
 */
@Component
public class MessageProcessor {
  private static final Logger log = LoggerFactory.getLogger(MessageProcessor.class);
  private static final Map<String, String> TRANSACTION_RETRY_CAUSES =
      Map.of("40001", "SerializationFailure", "40P01", "DeadlockDetected");
  private static final int MAX_TRANSACTION_ATTEMPTS = 8;
  private static final int MAX_HANDLER_ATTEMPTS = 3;

  /** Not the message's fault (the database went away): acknowledge nothing, try it again. */
  public static final class RetryLater extends RuntimeException {
    RetryLater(Throwable cause) {
      super(cause.getMessage(), cause);
    }
  }

  private final MessageTransaction transaction;
  private final Map<String, Handler> handlers;
  private final Set<String> ignoredTypes;
  private final ConsumerMetrics metrics;
  private final Duration horizon;
  private final Telemetry telemetry;
  private final String consumerName;

  public MessageProcessor(
      MessageTransaction transaction, InventoryHandlers inventory, ConsumerMetrics metrics,
      ConsumerSettings settings, Telemetry telemetry) {
    this.telemetry = telemetry;
    this.transaction = transaction; // the Spring proxy: apply() runs in its own transaction
    this.handlers = inventory.handlers();
    this.ignoredTypes = InventoryHandlers.IGNORED_TYPES;
    this.metrics = metrics;
    this.horizon = Duration.ofMillis((long) (settings.dedupHorizonDays() * 86_400_000L));
    this.consumerName = settings.effectiveConsumerName();
  }

  /** Apply `event` once: "applied", "duplicate" or "ignored"; or throw TerminalFailure or RetryLater. */
  public String process(Envelope event) {
    if (ignoredTypes.contains(event.type())) {
      record(event, "ignored");
      return "ignored";
    }
    Handler handler;
    try {
      handler = eligible(event);
    } catch (TerminalFailure refused) {
      MessageTransaction.Result duplicate;
      try {
        duplicate = transaction.committed(event); // a copy of an applied message: its id decides
      } catch (DataAccessException unreadable) {
        throw refused;
      }
      if (duplicate == null) {
        throw refused;
      }
      record(event, duplicate);
      return duplicate.outcome().label;
    }
    int transactionAttempts = 0;
    int handlerAttempts = 0;
    while (true) {
      long started = System.nanoTime();
      try {
        MessageTransaction.Result result = transaction.apply(event, handler);
        metrics.transaction(Duration.ofNanos(System.nanoTime() - started));
        record(event, result);
        return result.outcome().label;
      } catch (Exception error) {
        metrics.rollback();
        record(event, "retryable_failure");
        if (error instanceof MessageTransaction.HandlerBrokeTransaction) {
          throw new TerminalFailure("handler_broke_transaction", error);
        }
        String state = sqlState(error);
        if (connectionLost(error, state)) {
          throw new RetryLater(error);
        }
        String cause = state == null ? null : TRANSACTION_RETRY_CAUSES.get(state);
        if (cause != null) {
          transactionAttempts += 1;
          if (transactionAttempts >= MAX_TRANSACTION_ATTEMPTS) {
            throw new TerminalFailure("transaction_retries_exhausted", error);
          }
          metrics.retry(cause);
          backoff(transactionAttempts);
          continue;
        }
        handlerAttempts += 1;
        if (error instanceof Handler.NonRetryable || handlerAttempts >= MAX_HANDLER_ATTEMPTS) {
          throw new TerminalFailure("handler_failed", error);
        }
        metrics.retry("handler_error");
        backoff(handlerAttempts);
      }
    }
  }

  private Handler eligible(Envelope event) {
    Handler handler = handlers.get(event.type());
    if (handler == null) {
      throw new TerminalFailure("unknown_type", "Refused", "no handler for event type '" + event.type() + "'");
    }
    // As the markers' retention counts a message's age: from the time its id carries (a UUIDv7's,
    // which no copy can change), else, for an untimed id, from its occurred_at.
    Instant minted = Envelope.idTime(event.messageId());
    Instant born = minted != null ? minted : OffsetDateTime.parse(event.occurredAt().replace(' ', 'T')).toInstant();
    if (born.isBefore(Instant.now().minus(horizon))) {
      throw new TerminalFailure("beyond_dedup_horizon", "Refused", (minted != null ? "its id was minted at " : "occurred at ")
          + born + ", older than the " + horizon + " the markers are kept: applying it could repeat an effect whose"
          + " marker was purged");
    }
    return handler;
  }

  /** The SQLSTATE of the first SQLException in the cause chain (Spring wraps the driver's). */
  static String sqlState(Throwable error) {
    for (Throwable cause = error; cause != null; cause = cause.getCause()) {
      if (cause instanceof SQLException sql && sql.getSQLState() != null) {
        return sql.getSQLState();
      }
    }
    return null;
  }

  /** The session is gone: no connection to be had, or the server ending it (SQLSTATE 08, 57P). */
  private static boolean connectionLost(Throwable error, String state) {
    if (state != null && (state.startsWith("08") || state.startsWith("57P"))) {
      return true;
    }
    return error instanceof CannotCreateTransactionException || error instanceof DataAccessResourceFailureException;
  }

  private static void backoff(int attempt) {
    long ceiling = Math.min(1000L, 5L << Math.min(attempt, 20));
    try {
      Thread.sleep(ThreadLocalRandom.current().nextLong(ceiling + 1));
    } catch (InterruptedException interrupted) {
      Thread.currentThread().interrupt();
    }
  }

  /** Count an outcome, tell it (telemetry) and log it (with ids, never the payload). */
  public void record(Envelope event, String outcome) {
    record(event, outcome, Map.of());
  }

  /** A transaction's result: a copy with other content names its differing fields, never their values. */
  private void record(Envelope event, MessageTransaction.Result result) {
    if (result.differingFields().isEmpty()) {
      record(event, result.outcome().label);
    } else {
      record(event, result.outcome().label, Map.of("differing_fields", result.differingFields()));
    }
  }

  public void record(Envelope event, String outcome, Map<String, Object> fields) {
    String eventType = event == null ? "(undecodable)" : event.type();
    metrics.count(eventType, outcome);
    Map<String, Object> told = new java.util.HashMap<>(fields);
    told.put("consumer", consumerName);
    told.put("strategy", "correct");
    told.put("message_id", event == null ? null : event.messageId());
    told.put("key", event == null ? null : event.key());
    told.put("event_type", eventType);
    told.put("outcome", outcome);
    telemetry.emit("delivery", told);
    // As the Python runtime: a delivery that went as it should is logged at DEBUG only.
    if (outcome.equals("applied") || outcome.equals("duplicate") || outcome.equals("ignored")) {
      log.debug("message {} message_id={} key={} event_type={} trace_id={}", outcome,
          event == null ? null : event.messageId(), event == null ? null : event.key(), eventType,
          event == null ? null : event.traceId());
    } else {
      log.warn("message {} message_id={} event_type={}{}", outcome, event == null ? null : event.messageId(), eventType,
          fields.containsKey("differing_fields") ? " differing_fields=" + fields.get("differing_fields") : "");
    }
  }
}
