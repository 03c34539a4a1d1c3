package effectivelyonce.inventory;

import io.micrometer.core.instrument.binder.system.UptimeMetrics;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.common.errors.UnreleasedInstanceIdException;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.slf4j.LoggerFactory;
import org.springframework.context.annotation.Bean;
import org.springframework.context.event.EventListener;
import org.springframework.kafka.event.ConsumerStoppedEvent;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.util.backoff.FixedBackOff;

/**
 * `java -jar inventory-java.jar`: the inventory-reservation-v1 consumer process, configured by
 * the contract's environment variables (docs/consumer-process-contract.md). The one place that
 * wires settings into Spring Boot's own properties.
 */
@SpringBootApplication
public class InventoryApplication {

  public static void main(String[] args) {
    ConsumerSettings settings;
    Map<String, Object> properties;
    try {
      settings = ConsumerSettings.fromEnvironment(System.getenv());
      Map<String, Object> built = properties(settings);
      KafkaPrincipal.fromEnvironment(System.getenv()).ifPresent(principal -> built.putAll(principal.springProperties()));
      properties = built;
    } catch (ConsumerSettings.SettingsError error) {
      System.err.println("inventory-java: " + error.getMessage());
      System.exit(2);
      return;
    }
    SpringApplication application = new SpringApplication(InventoryApplication.class);
    application.setDefaultProperties(properties);
    application.addInitializers(context -> context.getBeanFactory().registerSingleton("consumerSettings", settings));
    application.run(args);
  }

  /** Spring Boot's properties from the contract's settings: Hikari, the Kafka client, the web server. */
  static Map<String, Object> properties(ConsumerSettings settings) {
    Map<String, Object> properties = new HashMap<>();
    properties.put("spring.main.banner-mode", "off");
    properties.put("spring.main.web-application-type", settings.controlPort() == null ? "none" : "servlet");
    if (settings.controlPort() != null) {
      properties.put("server.port", settings.controlPort());
      properties.put("server.address", settings.controlHost());
    }
    properties.put("spring.datasource.url", settings.jdbcUrl());
    if (settings.databaseUser() != null) {
      properties.put("spring.datasource.username", settings.databaseUser());
    }
    if (settings.databasePassword() != null) {
      properties.put("spring.datasource.password", settings.databasePassword());
    }
    // CONSUMER_MEMBERS group members, each a listener thread with one connection: one message's
    // transaction at a time on each.
    properties.put("spring.kafka.listener.concurrency", settings.members());
    properties.put("spring.datasource.hikari.maximum-pool-size", settings.members());
    if (settings.instanceId() != null) { // static membership: a restart takes its partitions back at once
      properties.put("spring.kafka.consumer.properties.group.instance.id", settings.instanceId());
    }
    properties.put("spring.datasource.hikari.connection-timeout", 5000);
    properties.put("spring.datasource.hikari.initialization-fail-timeout", -1);
    properties.put("spring.datasource.hikari.transaction-isolation",
        "TRANSACTION_" + settings.isolationLevel().name());
    properties.put("spring.datasource.hikari.data-source-properties.ApplicationName", settings.effectiveProcessName());
    properties.put("spring.kafka.bootstrap-servers", settings.bootstrapServers());
    properties.put("spring.kafka.client-id", settings.effectiveProcessName());
    properties.put("spring.kafka.consumer.auto-offset-reset", "earliest");
    properties.put("spring.kafka.consumer.enable-auto-commit", false);
    properties.put("spring.kafka.consumer.key-deserializer",
        "org.apache.kafka.common.serialization.ByteArrayDeserializer");
    properties.put("spring.kafka.consumer.value-deserializer",
        "org.apache.kafka.common.serialization.ByteArrayDeserializer");
    if (settings.groupProtocol().equals("consumer")) {
      // KIP-848: the broker assigns (range, as the demo's Python members ask) and holds the session
      // and heartbeat settings; the client refuses the classic ones with it.
      properties.put("spring.kafka.consumer.properties.group.protocol", "consumer");
      properties.put("spring.kafka.consumer.properties.group.remote.assignor", "range");
    } else {
      properties.put("spring.kafka.consumer.properties.session.timeout.ms", 6000);
      properties.put("spring.kafka.consumer.properties.heartbeat.interval.ms", 1000);
      // The strategies every implementation's client knows ("range" for librdkafka, "roundrobin" for
      // all three), so members of another implementation can share the group while one replaces another.
      properties.put("spring.kafka.consumer.properties.partition.assignment.strategy",
          "org.apache.kafka.clients.consumer.RangeAssignor,org.apache.kafka.clients.consumer.RoundRobinAssignor,"
              + "org.apache.kafka.clients.consumer.CooperativeStickyAssignor");
    }
    // A record's offset is committed only once the listener called acknowledge() for it, which it
    // does after COMMIT. "manual" queues those acknowledgments and commits them together when the
    // records of one poll are done (and before partitions are revoked): one broker round trip per
    // poll instead of per record. A crash loses only acknowledgments not yet committed, whose
    // records come again as duplicates.
    properties.put("spring.kafka.listener.ack-mode", "manual");
    properties.put("spring.kafka.producer.acks", "all");
    properties.put("spring.kafka.producer.key-serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
    properties.put("spring.kafka.producer.value-serializer",
        "org.apache.kafka.common.serialization.ByteArraySerializer");
    properties.put("spring.kafka.producer.properties.enable.idempotence", true);
    properties.put("logging.structured.format.console", "logstash");
    properties.put("logging.level.root", settings.logLevel()); // LOG_LEVEL, as the Python runtime reads it
    return properties;
  }

  @Bean
  PrometheusMeterRegistry prometheusMeterRegistry() {
    PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
    new UptimeMetrics().bindTo(registry); // process_start_time_seconds: how a restart is told
    return registry;
  }

  @Bean
  ConsumerMetrics consumerMetrics(PrometheusMeterRegistry registry, ConsumerSettings settings,
      InventoryHandlers inventory) {
    return new ConsumerMetrics(registry, settings.effectiveConsumerName(), inventory.handlers().keySet());
  }

  @Bean
  FaultPoints faultPoints(PrometheusMeterRegistry registry, ConsumerSettings settings, Telemetry telemetry) {
    FaultPoints faults = new FaultPoints(registry);
    faults.armFromSpec(settings.faults());
    faults.onFire((point, action, inHand) -> {
      Map<String, Object> told = new HashMap<>(inHand);
      told.put("point", point);
      told.put("action", action);
      telemetry.emit("fault", told);
      if (action.equals("crash")) {
        telemetry.flush();
      }
    });
    return faults;
  }

  /**
   * A listener container that stops for any reason but a normal shutdown (fenced as a static
   * member after a broker restart, an authorization failure, an error) will never consume again:
   * the process ends (exit 70), for its supervisor to start a fresh one, rather than stay up while
   * its partitions' messages wait. Nothing is lost: only committed work was acknowledged.
   */
  @EventListener
  public void onConsumerStopped(ConsumerStoppedEvent stopped) {
    if (stopped.getReason() != ConsumerStoppedEvent.Reason.NORMAL) {
      LoggerFactory.getLogger(InventoryApplication.class)
          .error("the Kafka consumer stopped for good ({}); ending the process", stopped.getReason());
      Runtime.getRuntime().halt(70);
    }
  }

  /** The listener handles every failure itself; an exception that still escapes (a shutdown in
   * the middle of a retry) must never let the container skip the record: retry it for ever.
   *
   * <p>Under the consumer protocol (KIP-848) a process started again at once after a crash is
   * refused its static instance id until the broker's session for the crashed one ends, and the
   * client's member is then failed for good, while the container goes on polling it and consumes
   * nothing. The process ends (exit 70) instead, for its supervisor to start a fresh one, which
   * the broker lets in once that session ended. Nothing is lost: the refused member was never
   * assigned a partition. */
  @Bean
  DefaultErrorHandler neverSkip() {
    return new DefaultErrorHandler(new FixedBackOff(1000L, FixedBackOff.UNLIMITED_ATTEMPTS)) {
      @Override
      public void handleOtherException(Exception thrown, Consumer<?, ?> consumer,
          MessageListenerContainer container, boolean batchListener) {
        for (Throwable cause = thrown; cause != null; cause = cause.getCause()) {
          if (cause instanceof UnreleasedInstanceIdException) {
            LoggerFactory.getLogger(InventoryApplication.class).error(
                "the group refused this member its instance id ({}); ending the process", cause.getMessage());
            Runtime.getRuntime().halt(70);
          }
        }
        super.handleOtherException(thrown, consumer, container, batchListener);
      }
    };
  }
}
