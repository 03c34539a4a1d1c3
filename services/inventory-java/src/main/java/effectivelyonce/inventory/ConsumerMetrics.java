package effectivelyonce.inventory;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import java.time.Duration;
import java.util.List;

/**
 * The runtime's series under the Python runtime's names and labels (Micrometer adds `_total` to
 * counters and `_seconds` to timers in the Prometheus exposition).
 */
public final class ConsumerMetrics {
  public static final List<String> OUTCOMES =
      List.of("applied", "duplicate", "duplicate_with_different_content", "ignored", "retryable_failure",
          "terminal_failure");

  private final MeterRegistry registry;
  private final String consumer;
  private final Timer transactionSeconds;
  private final Timer claimWaitSeconds;

  public ConsumerMetrics(MeterRegistry registry, String consumer, Iterable<String> eventTypes) {
    this.registry = registry;
    this.consumer = consumer;
    this.transactionSeconds = Timer.builder("eo.consumer.transaction")
        .description("Time from BEGIN to COMMIT of one message's transaction.")
        .tag("consumer", consumer).publishPercentileHistogram().register(registry);
    this.claimWaitSeconds = Timer.builder("eo.consumer.claim.wait")
        .description("Time the marker INSERT took, including any wait on another transaction's claim.")
        .tag("consumer", consumer).publishPercentileHistogram().register(registry);
    Gauge.builder("eo.consumer.strategy.info", () -> 1)
        .description("1 for the strategy a consumer runs; this implementation runs only the correct one.")
        .tags("consumer", consumer, "strategy", "correct").register(registry);
    for (String eventType : eventTypes) {
      for (String outcome : OUTCOMES) {
        outcome(eventType, outcome);
      }
    }
  }

  private Counter outcome(String eventType, String outcome) {
    return Counter.builder("eo.consumer.messages").description("Deliveries handled, by what became of them.")
        .tags("consumer", consumer, "event_type", eventType, "outcome", outcome, "strategy", "correct")
        .register(registry);
  }

  public void count(String eventType, String outcome) {
    outcome(eventType, outcome).increment();
  }

  public void retry(String cause) {
    Counter.builder("eo.consumer.retries").description("Whole-transaction retries, by cause.")
        .tags("consumer", consumer, "cause", cause).register(registry).increment();
  }

  public void rollback() {
    Counter.builder("eo.consumer.rollbacks").description("Transactions rolled back.")
        .tag("consumer", consumer).register(registry).increment();
  }

  public void deadLetter(String reason) {
    Counter.builder("eo.consumer.dead.letters").description("Messages sent to the dead-letter topic.")
        .tags("consumer", consumer, "reason", reason).register(registry).increment();
  }

  public void transaction(Duration took) {
    transactionSeconds.record(took);
  }

  public void claimWait(Duration took) {
    claimWaitSeconds.record(took);
  }
}
