package effectivelyonce.inventory;

import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.List;
import javax.sql.DataSource;
import org.postgresql.core.BaseConnection;
import org.postgresql.core.TransactionState;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceUtils;
import org.springframework.stereotype.Service;
import org.springframework.transaction.annotation.Propagation;
import org.springframework.transaction.annotation.Transactional;

/**
 * The correct path, alone: claim → handler → commit, as one transactional method.
 *
 * `apply` runs in a transaction of its own (REQUIRES_NEW): whatever the caller is in, the marker
 * and the business change commit together when the method returns through its Spring proxy,
 * before the listener acknowledges. It must be called on the injected bean (the proxy), never as
 * `this.apply(...)`, which would bypass the transaction. Every exception rolls back, checked ones
 * included (rollbackFor), since a rolled-back attempt is never acknowledged.
 *
 * The marker is claimed with INSERT … ON CONFLICT DO NOTHING on (consumer, message id): a duplicate
 * inserts nothing, asks how its content differs from the copy applied under its id (a copy with
 * other content is counted apart), and commits an empty transaction; a concurrent copy waits on
 * the unique index until the first commits (then it is a duplicate, or 40001 under snapshot
 * isolation) or rolls back.
 */
@Service
public class MessageTransaction {
  /**
   * The claim. Its key is (consumer, message id): id_time is the time the id itself carries (a
   * CHECK ties the two, migration 0008), and the content digest only tells a copy apart.
   */
  static final String CLAIM =
      "INSERT INTO processed_message (consumer_name, message_id, id_time, content_digest)"
          + " VALUES (?, ?, message_id_time(?), message_content_digest(?::jsonb, ?::jsonb)) ON CONFLICT DO NOTHING";

  /** How a duplicate's content differs from the copy applied under its id (NULL: no digest kept). */
  static final String DIFFERENCES =
      "SELECT message_content_differences(content_digest, message_content_digest(?::jsonb, ?::jsonb))"
          + " FROM processed_message WHERE consumer_name = ? AND message_id = ? AND id_time = message_id_time(?)";

  /** The handler ended the transaction: the message fails (dead-lettered). */
  public static final class HandlerBrokeTransaction extends RuntimeException {
    HandlerBrokeTransaction(String message) {
      super(message);
    }
  }

  public enum Outcome {
    APPLIED("applied"),
    DUPLICATE("duplicate"),
    DUPLICATE_WITH_DIFFERENT_CONTENT("duplicate_with_different_content");

    public final String label;

    Outcome(String label) {
      this.label = label;
    }
  }

  /** What one attempt came to, and for a copy with other content, the fields that differ. */
  public record Result(Outcome outcome, List<String> differingFields) {}

  private final JdbcTemplate jdbc;
  private final DataSource dataSource;
  private final FaultPoints faults;
  private final ConsumerMetrics metrics;
  private final String consumerName;

  public MessageTransaction(
      JdbcTemplate jdbc, DataSource dataSource, FaultPoints faults, ConsumerMetrics metrics,
      ConsumerSettings settings) {
    this.jdbc = jdbc;
    this.dataSource = dataSource;
    this.faults = faults;
    this.metrics = metrics;
    this.consumerName = settings.effectiveConsumerName();
  }

  @Transactional(propagation = Propagation.REQUIRES_NEW, rollbackFor = Exception.class)
  public Result apply(Envelope event, Handler handler) throws SQLException {
    faults.hit("before_claim");
    long started = System.nanoTime();
    int claimed = jdbc.update(CLAIM, consumerName, event.messageId(), event.messageId(), event.body(),
        event.delivery());
    metrics.claimWait(Duration.ofNanos(System.nanoTime() - started));
    if (claimed == 0) { // the empty transaction commits
      Result duplicate = committed(event);
      return duplicate != null ? duplicate : new Result(Outcome.DUPLICATE, List.of());
    }
    faults.hit("after_claim");
    handler.handle(event, jdbc);
    checkStillOpen();
    faults.hit("before_commit");
    return new Result(Outcome.APPLIED, List.of());
  }

  /**
   * A duplicate's result when this consumer's marker for `event` is committed (with the fields in
   * which the copy differs from what was applied under its id), or null when there is none.
   * Outside a transaction (on the bean, not through apply) it is one read of its own.
   */
  public Result committed(Envelope event) {
    List<String[]> rows = jdbc.query(DIFFERENCES, (row, n) -> {
      java.sql.Array fields = row.getArray(1);
      return fields == null ? new String[0] : (String[]) fields.getArray();
    }, event.body(), event.delivery(), consumerName, event.messageId(), event.messageId());
    if (rows.isEmpty()) {
      return null;
    }
    List<String> differing = List.of(rows.get(0));
    return new Result(differing.isEmpty() ? Outcome.DUPLICATE : Outcome.DUPLICATE_WITH_DIFFERENT_CONTENT, differing);
  }

  /** The server's word on the session (ReadyForQuery), as the driver last read it. */
  private void checkStillOpen() throws SQLException {
    Connection connection = DataSourceUtils.getConnection(dataSource);
    TransactionState state = connection.unwrap(BaseConnection.class).getTransactionState();
    if (state == TransactionState.IDLE) {
      throw new HandlerBrokeTransaction("the handler ended the transaction (a COMMIT or ROLLBACK)");
    }
    if (state == TransactionState.FAILED) {
      throw new IllegalStateException("a statement in the handler failed and the transaction is aborted");
    }
  }
}
