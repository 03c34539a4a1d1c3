package effectivelyonce.inventory;

import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.boot.context.event.ApplicationReadyEvent;
import org.springframework.context.event.EventListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.stereotype.Component;

/**
 * Delivery telemetry, as the Python runtime tells it (effectively_once/telemetry.py): what this
 * process did with each message, on the `platform.telemetry` topic (TELEMETRY_TOPIC; empty: off),
 * keyed by order. The chaos panel reads it to draw each order's timeline. Ids, never payloads.
 * Fire-and-forget: it never slows a transaction or changes an outcome; a crash flushes first.
 */
@Component
public class Telemetry {
  private static final Logger log = LoggerFactory.getLogger(Telemetry.class);

  private final KafkaTemplate<byte[], byte[]> kafka;
  private final String topic;
  private final Map<String, Object> own = new LinkedHashMap<>();
  private final ConsumerSettings settings;

  public Telemetry(KafkaTemplate<byte[], byte[]> kafka, ConsumerSettings settings) {
    this.kafka = kafka;
    this.settings = settings;
    this.topic = settings.telemetryTopic();
    String process = settings.effectiveProcessName();
    own.put("process", process);
    own.put("instance", process + "@" + hostname());
    own.put("pid", ProcessHandle.current().pid());
    own.put("run_id", System.getenv().getOrDefault("EO_RUN_ID", ""));
  }

  public void emit(String kind, Map<String, Object> fields) {
    if (topic.isEmpty()) {
      return;
    }
    Map<String, Object> record = new LinkedHashMap<>(own);
    record.put("kind", kind);
    record.put("at", System.currentTimeMillis() / 1000.0);
    fields.forEach((name, value) -> {
      if (value != null) {
        record.put(name, value);
      }
    });
    Object key = fields.get("key");
    byte[] keyBytes = key instanceof String text ? text.getBytes(StandardCharsets.UTF_8) : null;
    try {
      kafka.send(new ProducerRecord<>(topic, keyBytes, Envelope.JSON.writeValueAsBytes(record)));
    } catch (RuntimeException dropped) { // a full buffer or a gone broker: drop, never block
      log.debug("telemetry dropped: {}", dropped.getMessage());
    }
  }

  /** Wait for what was told so far (a crash is about to lose it). */
  public void flush() {
    if (!topic.isEmpty()) {
      kafka.flush();
    }
  }

  @EventListener(ApplicationReadyEvent.class)
  public void started() {
    emit("started", Map.of("consumer", settings.effectiveConsumerName(), "strategy", "correct",
        "members", settings.members()));
  }

  private static String hostname() {
    try {
      return InetAddress.getLocalHost().getHostName();
    } catch (java.net.UnknownHostException unknown) {
      return "localhost";
    }
  }
}
