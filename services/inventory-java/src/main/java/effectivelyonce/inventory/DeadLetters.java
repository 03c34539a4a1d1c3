package effectivelyonce.inventory;

import java.nio.charset.StandardCharsets;
import java.time.OffsetDateTime;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.stereotype.Component;

/**
 * The dead-letter topic: the original bytes and key, with `eo-` headers saying why, from where and
 * when. A dead letter counts once the broker confirmed it (acks=all); until then the original is
 * not acknowledged.
 */
@Component
public class DeadLetters {
  public static final String HEADER_PREFIX = "eo-";

  /** A message that cannot be applied, with the reason its dead letter carries. */
  public static final class TerminalFailure extends RuntimeException {
    public final String reason;
    public final String errorClass;
    public final String errorText;

    public TerminalFailure(String reason, Throwable error) {
      this(reason, error.getClass().getSimpleName(), String.valueOf(error.getMessage()));
    }

    public TerminalFailure(String reason, String errorClass, String errorText) {
      super(reason + ": " + errorClass + ": " + errorText);
      this.reason = reason;
      this.errorClass = errorClass;
      this.errorText = errorText.length() > 2000 ? errorText.substring(0, 2000) : errorText;
    }
  }

  private final KafkaTemplate<byte[], byte[]> kafka;
  private final ConsumerMetrics metrics;
  private final String consumerName;
  private final String topic;

  public DeadLetters(KafkaTemplate<byte[], byte[]> kafka, ConsumerMetrics metrics, ConsumerSettings settings) {
    this.kafka = kafka;
    this.metrics = metrics;
    this.consumerName = settings.effectiveConsumerName();
    this.topic = settings.effectiveDeadLetterTopic();
  }

  /** Publish the dead letter and return once the broker confirmed it; throws otherwise. */
  public void publish(ConsumerRecord<byte[], byte[]> original, TerminalFailure failure, String messageId)
      throws Exception {
    Map<String, String> headers = new LinkedHashMap<>();
    headers.put("reason", failure.reason);
    headers.put("error-class", failure.errorClass);
    headers.put("error", failure.errorText);
    headers.put("consumer", consumerName);
    headers.put("original-topic", original.topic());
    headers.put("original-partition", String.valueOf(original.partition()));
    headers.put("original-offset", String.valueOf(original.offset()));
    headers.put("message-id", messageId == null ? "" : messageId);
    headers.put("dead-lettered-at", OffsetDateTime.now().toString());
    ProducerRecord<byte[], byte[]> letter = new ProducerRecord<>(topic, original.key(), original.value());
    headers.forEach((name, value) -> letter.headers().add(HEADER_PREFIX + name, value.getBytes(StandardCharsets.UTF_8)));
    kafka.send(letter).get(30, TimeUnit.SECONDS);
    metrics.deadLetter(failure.reason);
  }
}
