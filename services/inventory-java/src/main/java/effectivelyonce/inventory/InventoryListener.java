package effectivelyonce.inventory;

import effectivelyonce.inventory.DeadLetters.TerminalFailure;
import java.util.concurrent.ThreadLocalRandom;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.stereotype.Component;

/**
 * The Kafka side: take a record, run it through the processor, and only then acknowledge it.
 *
 * The container runs with AckMode.MANUAL_IMMEDIATE: nothing is committed until
 * `acknowledgment.acknowledge()`, which commits the record's offset at once. It is called after
 * MessageTransaction.apply returned, i.e. after its REQUIRES_NEW transaction committed (applied,
 * duplicate), or after the broker confirmed the dead letter (terminal failure). A crash before it,
 * even right after COMMIT, redelivers the record and the marker makes it a duplicate. A lost
 * database session acknowledges nothing: the same record is tried until the database answers.
 */
@Component
public class InventoryListener {
  private static final Logger log = LoggerFactory.getLogger(InventoryListener.class);

  private final MessageProcessor processor;
  private final DeadLetters deadLetters;
  private final FaultPoints faults;

  public InventoryListener(MessageProcessor processor, DeadLetters deadLetters, FaultPoints faults) {
    this.processor = processor;
    this.deadLetters = deadLetters;
    this.faults = faults;
  }

  @KafkaListener(
      id = "inventory",
      topics = "#{@consumerSettings.effectiveTopics()}",
      groupId = "#{@consumerSettings.effectiveGroup()}")
  public void onMessage(ConsumerRecord<byte[], byte[]> record, Acknowledgment acknowledgment) throws Exception {
    Envelope event = null;
    for (int attempt = 1; ; attempt++) {
      try {
        event = Envelope.decode(record.value());
        processor.process(event);
        break;
      } catch (MessageProcessor.RetryLater lost) {
        log.warn("database unavailable; the message waits: {}", lost.getMessage());
        backOff(attempt);
      } catch (PoisonMessage poison) {
        deadLetter(record, new TerminalFailure(poison.reason, poison), poison.messageId, null);
        break;
      } catch (TerminalFailure failure) {
        deadLetter(record, failure, event.messageId(), event);
        break;
      }
    }
    faults.hit("after_commit_before_ack");
    acknowledgment.acknowledge();
  }

  /** Publish the dead letter until the broker confirms it; only then may the original be acknowledged. */
  private void deadLetter(ConsumerRecord<byte[], byte[]> record, TerminalFailure failure, String messageId,
      Envelope event) throws InterruptedException {
    for (int attempt = 1; ; attempt++) {
      try {
        deadLetters.publish(record, failure, messageId);
        break;
      } catch (Exception unconfirmed) {
        log.warn("dead letter not confirmed; trying again: {}", unconfirmed.getMessage());
        backOff(attempt);
      }
    }
    processor.record(event, "terminal_failure");
  }

  private static void backOff(int attempt) throws InterruptedException {
    Thread.sleep(ThreadLocalRandom.current().nextLong(Math.min(5000L, 100L << Math.min(attempt, 10)) + 1));
  }
}
