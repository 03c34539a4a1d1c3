package effectivelyonce.inventory;

import org.springframework.jdbc.core.JdbcTemplate;

/**
 * A service's business logic for one event type. It runs inside the message's transaction: every
 * statement it sends through `transaction` joins it. It must not end it (the runtime checks).
 */
@FunctionalInterface
public interface Handler {
  void handle(Envelope event, JdbcTemplate transaction);

  /** Thrown by a handler for a failure no retry can fix: dead-lettered at the first attempt. */
  final class NonRetryable extends RuntimeException {
    public NonRetryable(String message) {
      super(message);
    }
  }
}
