package effectivelyonce.inventory;

import effectivelyonce.inventory.DeadLetters.TerminalFailure;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaAdmin;
import org.springframework.kafka.listener.AbstractConsumerSeekAware;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.stereotype.Component;

/**
 * The Kafka side: take a record, run it through the processor, and only then acknowledge it.
 *
 * The container runs with AckMode.MANUAL: no offset is committed until
 * `acknowledgment.acknowledge()` was called for its record; the container commits the
 * acknowledged offsets of one poll together once its records are done. It is called after
 * MessageTransaction.apply returned, i.e. after its REQUIRES_NEW transaction committed (applied,
 * duplicate), or after the broker confirmed the dead letter (terminal failure). A crash before it,
 * even right after COMMIT, redelivers the record and the marker makes it a duplicate. A lost
 * database session acknowledges nothing: the same record is tried until the database answers.
 */
@Component
public class InventoryListener extends AbstractConsumerSeekAware {
  private static final Logger log = LoggerFactory.getLogger(InventoryListener.class);

  private final MessageProcessor processor;
  private final DeadLetters deadLetters;
  private final FaultPoints faults;
  private final String consumerName;
  private final KafkaAdmin kafkaAdmin;

  public InventoryListener(MessageProcessor processor, DeadLetters deadLetters, FaultPoints faults,
      ConsumerSettings settings, KafkaAdmin kafkaAdmin) {
    this.kafkaAdmin = kafkaAdmin;
    this.consumerName = settings.effectiveConsumerName();
    this.processor = processor;
    this.deadLetters = deadLetters;
    this.faults = faults;
  }

  @KafkaListener(
      id = "inventory",
      topics = "#{@consumerSettings.effectiveTopics()}",
      groupId = "#{@consumerSettings.effectiveGroup()}")
  public void onMessage(ConsumerRecord<byte[], byte[]> record, Acknowledgment acknowledgment) throws Exception {
    faults.setContext(inHand(record));
    try {
      acknowledgeAfter(record, acknowledgment);
    } finally {
      faults.clearContext();
    }
  }

  /** What a fault point tells about this record: the consumer, and the event's key and id if it decodes. */
  private Map<String, Object> inHand(ConsumerRecord<byte[], byte[]> record) {
    try {
      Envelope event = Envelope.decode(record.value());
      return Map.of("consumer", consumerName, "keys", List.of(event.key()), "message_ids", List.of(event.messageId()));
    } catch (PoisonMessage poison) {
      return Map.of("consumer", consumerName, "keys", List.of(), "message_ids", List.of());
    }
  }

  private void acknowledgeAfter(ConsumerRecord<byte[], byte[]> record, Acknowledgment acknowledgment)
      throws Exception {
    Envelope event = null;
    for (int attempt = 1; ; attempt++) {
      try {
        event = Envelope.decode(record.value(), record.key(), record.headers());
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

  /**
   * Move every assigned partition of every listener thread back to a time (null: the beginning):
   * what follows is delivered again, and the markers make it duplicates. Never forward
   * (RewindTarget): the time's offsets are asked of the broker now, and Spring Kafka queues each
   * seek for its consumer's thread, which takes the earlier of that offset and its position before
   * its next poll.
   */
  public List<Map<String, Object>> rewind(Long toTimestampMs) throws Exception {
    var assigned = getTopicsAndCallbacks();
    Map<TopicPartition, Long> atTime = toTimestampMs == null ? Map.of() : offsetsAt(assigned.keySet(), toTimestampMs);
    List<Map<String, Object>> moved = new java.util.ArrayList<>();
    for (var entry : assigned.entrySet()) {
      TopicPartition partition = entry.getKey();
      Long found = atTime.get(partition);
      for (var callback : entry.getValue()) {
        if (found == null) {
          callback.seekToBeginning(partition.topic(), partition.partition());
        } else {
          callback.seek(partition.topic(), partition.partition(), standsAt -> RewindTarget.of(found, standsAt));
        }
      }
      moved.add(Map.of("topic", partition.topic(), "partition", partition.partition(),
          "offset", found == null ? "beginning" : found < 0 ? "where it stands" : "at most " + found));
    }
    log.warn("rewound {} partition(s); what follows is delivered again", moved.size());
    return moved;
  }

  /** The first offset at or after `timestampMs` in each partition, -1 where no message is. */
  private Map<TopicPartition, Long> offsetsAt(java.util.Collection<TopicPartition> partitions, long timestampMs)
      throws Exception {
    Map<TopicPartition, OffsetSpec> asked = new java.util.HashMap<>();
    for (TopicPartition partition : partitions) {
      asked.put(partition, OffsetSpec.forTimestamp(timestampMs));
    }
    try (Admin admin = Admin.create(kafkaAdmin.getConfigurationProperties())) {
      Map<TopicPartition, Long> found = new java.util.HashMap<>();
      admin.listOffsets(asked).all().get(10, java.util.concurrent.TimeUnit.SECONDS)
          .forEach((partition, info) -> found.put(partition, info.offset()));
      return found;
    }
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
    Map<String, Object> where = new java.util.HashMap<>();
    where.put("reason", failure.reason);
    where.put("error_class", failure.errorClass);
    where.put("topic", record.topic());
    where.put("partition", record.partition());
    where.put("offset", record.offset());
    processor.record(event, "terminal_failure", where);
  }

  private static void backOff(int attempt) throws InterruptedException {
    Thread.sleep(ThreadLocalRandom.current().nextLong(Math.min(5000L, 100L << Math.min(attempt, 10)) + 1));
  }
}
