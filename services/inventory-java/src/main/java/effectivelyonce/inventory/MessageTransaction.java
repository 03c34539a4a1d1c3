package effectivelyonce.inventory;

import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
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
 * The marker is claimed with INSERT … ON CONFLICT DO NOTHING: a duplicate inserts nothing and
 * commits an empty transaction; a concurrent copy waits on the unique index until the first
 * commits (then it is a duplicate, or 40001 under snapshot isolation) or rolls back.
 */
@Service
public class MessageTransaction {
  /**
   * Consumer, message id and the message's occurred_at: markers are partitioned by the day their
   * message occurred, so the key holds it.
   */
  static final String CLAIM =
      "INSERT INTO processed_message (consumer_name, message_id, occurred_at)"
          + " VALUES (?, ?, ?::timestamptz) ON CONFLICT DO NOTHING";

  /**
   * The same, while markers from before that partitioning remain in processed_message_legacy
   * (after an upgrade, until retention empties it): about 60 µs more a claim.
   */
  static final String CLAIM_BESIDE_LEGACY =
      "INSERT INTO processed_message (consumer_name, message_id, occurred_at)"
          + " SELECT m.c, m.id, m.at FROM (VALUES (?, ?, ?::timestamptz)) AS m (c, id, at)"
          + " WHERE NOT EXISTS (SELECT FROM processed_message_legacy l"
          + " WHERE l.consumer_name = m.c AND l.message_id = m.id)"
          + " ON CONFLICT DO NOTHING";

  static final String LEGACY_MARKERS_REMAIN =
      "SELECT coalesce((SELECT relkind = 'r' FROM pg_class"
          + " WHERE oid = to_regclass('processed_message_legacy')), false)";

  /** The handler ended the transaction: the message fails (dead-lettered). */
  public static final class HandlerBrokeTransaction extends RuntimeException {
    HandlerBrokeTransaction(String message) {
      super(message);
    }
  }

  public enum Outcome {
    APPLIED("applied"),
    DUPLICATE("duplicate");

    public final String label;

    Outcome(String label) {
      this.label = label;
    }
  }

  private final JdbcTemplate jdbc;
  private final DataSource dataSource;
  private final FaultPoints faults;
  private final ConsumerMetrics metrics;
  private final String consumerName;
  private volatile String claim;

  public MessageTransaction(
      JdbcTemplate jdbc, DataSource dataSource, FaultPoints faults, ConsumerMetrics metrics,
      ConsumerSettings settings) {
    this.jdbc = jdbc;
    this.dataSource = dataSource;
    this.faults = faults;
    this.metrics = metrics;
    this.consumerName = settings.effectiveConsumerName();
  }

  /**
   * Choose the claim statement once, outside any transaction (the caller calls it before apply):
   * the legacy table becomes an empty view once retention empties it, and stays one.
   */
  public void chooseClaim() {
    if (claim == null) {
      claim = Boolean.TRUE.equals(jdbc.queryForObject(LEGACY_MARKERS_REMAIN, Boolean.class))
          ? CLAIM_BESIDE_LEGACY
          : CLAIM;
    }
  }

  @Transactional(propagation = Propagation.REQUIRES_NEW, rollbackFor = Exception.class)
  public Outcome apply(Envelope event, Handler handler) throws SQLException {
    faults.hit("before_claim");
    long started = System.nanoTime();
    String statement = claim == null ? CLAIM_BESIDE_LEGACY : claim; // not chosen yet: the one always correct
    int claimed = jdbc.update(statement, consumerName, event.messageId(), event.occurredAt());
    metrics.claimWait(Duration.ofNanos(System.nanoTime() - started));
    if (claimed == 0) {
      return Outcome.DUPLICATE; // the empty transaction commits
    }
    faults.hit("after_claim");
    handler.handle(event, jdbc);
    checkStillOpen();
    faults.hit("before_commit");
    return Outcome.APPLIED;
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
