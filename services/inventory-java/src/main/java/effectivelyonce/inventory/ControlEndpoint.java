package effectivelyonce.inventory;

import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.http.ResponseEntity;
import org.springframework.web.bind.annotation.DeleteMapping;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;
import tools.jackson.core.JacksonException;
import tools.jackson.databind.JsonNode;

/**
 * The control endpoint every process of the platform serves (docs/consumer-process-contract.md):
 * Prometheus metrics, and the fault points to arm. Who may call it is checked first, by
 * ControlDoor; bodies are checked here, strictly, as the Python runtime's ArmRequest does.
 */
@RestController
public class ControlEndpoint {
  static final Set<String> ARM_FIELDS = Set.of("point", "action", "times", "probability", "stall_seconds");

  /** A request refused with a 4xx naming the field. */
  static final class Refusal extends RuntimeException {
    final HttpStatus status;

    Refusal(HttpStatus status, String message) {
      super(message);
      this.status = status;
    }
  }

  private final FaultPoints faults;
  private final PrometheusMeterRegistry registry;
  private final String consumerName;
  private final InventoryListener listener;
  private final Telemetry telemetry;
  private final ConsumerSettings settings;

  public ControlEndpoint(FaultPoints faults, PrometheusMeterRegistry registry, ConsumerSettings settings,
      InventoryListener listener, Telemetry telemetry) {
    this.listener = listener;
    this.telemetry = telemetry;
    this.settings = settings;
    this.faults = faults;
    this.registry = registry;
    this.consumerName = settings.effectiveConsumerName();
  }

  @GetMapping(value = "/metrics", produces = "text/plain; version=0.0.4; charset=utf-8")
  public String metrics() {
    return registry.scrape();
  }

  @GetMapping(value = "/faults", produces = MediaType.APPLICATION_JSON_VALUE)
  public Map<String, Object> faults() {
    Map<String, Object> body = new LinkedHashMap<>();
    body.put("points", FaultPoints.RUNTIME_POINTS);
    body.put("actions", FaultPoints.ACTIONS);
    body.put("armed", faults.describeArmed());
    body.put("fired", faults.fired());
    body.put("consumer", consumerName);
    return body;
  }

  @PostMapping(value = "/faults", produces = MediaType.APPLICATION_JSON_VALUE)
  public Map<String, Object> arm(@RequestBody(required = false) byte[] raw) {
    JsonNode body = ControlDoor.readJson(raw);
    body.propertyNames().forEach(name -> {
      if (!ARM_FIELDS.contains(name)) {
        throw new Refusal(HttpStatus.BAD_REQUEST, ControlDoor.cut(name) + ": Extra inputs are not permitted");
      }
    });
    String point = stringField(body, "point");
    requireKnown(point);
    String action = stringField(body, "action");
    if (!FaultPoints.ACTIONS.contains(action)) {
      throw new Refusal(HttpStatus.BAD_REQUEST, "action: Input should be one of " + FaultPoints.ACTIONS
          + " (got " + ControlDoor.cut(action) + ")");
    }
    JsonNode times = body.get("times");
    Integer count = 1;
    if (times != null && (times.isNull() || "always".equals(times.asString(null)))) {
      count = null;
    } else if (times != null) {
      if (!times.isIntegralNumber() || !times.canConvertToInt() || times.asInt() < 1 || times.asInt() > 1_000_000) {
        throw new Refusal(HttpStatus.BAD_REQUEST, "times: a whole number from 1 to 1000000, \"always\" or null (got "
            + ControlDoor.cut(times.toString()) + ")");
      }
      count = times.asInt();
    }
    double probability = number(body, "probability", 1.0);
    if (!(probability > 0 && probability <= 1)) {
      throw new Refusal(HttpStatus.BAD_REQUEST, "probability: a number above 0 and at most 1");
    }
    double stall = number(body, "stall_seconds", 5.0);
    if (!(stall >= 0 && stall <= 120)) {
      throw new Refusal(HttpStatus.BAD_REQUEST, "stall_seconds: a number from 0 to 120");
    }
    faults.arm(point, new FaultPoints.Arming(action, count, probability, stall));
    return Map.of("armed", point);
  }

  @DeleteMapping(value = "/faults", produces = MediaType.APPLICATION_JSON_VALUE)
  public Map<String, Object> disarm(@RequestParam(required = false) String point) {
    if (point != null) {
      requireKnown(point);
    }
    faults.disarm(point);
    return Map.of("disarmed", point == null ? "all" : point);
  }

  @GetMapping(value = "/strategy", produces = MediaType.APPLICATION_JSON_VALUE)
  public Map<String, Object> strategy() {
    return Map.of("consumer", consumerName, "strategy", "correct", "strategies", java.util.List.of("correct"));
  }

  @PostMapping(value = "/strategy", produces = MediaType.APPLICATION_JSON_VALUE)
  public Map<String, Object> switchStrategy(@RequestBody(required = false) byte[] raw) {
    ControlDoor.readJson(raw);
    throw new Refusal(HttpStatus.CONFLICT,
        "this implementation runs the correct path only (it is given no teaching strategies)");
  }

  /** {"to": "beginning"} or {"to": an ISO 8601 time with a zone}: the group's partitions go back there. */
  @PostMapping(value = "/rewind", produces = MediaType.APPLICATION_JSON_VALUE)
  public Map<String, Object> rewind(@RequestBody(required = false) byte[] raw) {
    JsonNode body = ControlDoor.readJson(raw);
    body.propertyNames().forEach(name -> {
      if (!name.equals("to")) {
        throw new Refusal(HttpStatus.BAD_REQUEST, ControlDoor.cut(name) + ": Extra inputs are not permitted");
      }
    });
    String to = stringField(body, "to");
    Long target = null;
    if (!to.equals("beginning")) {
      try {
        target = java.time.OffsetDateTime.parse(to.replace("Z", "+00:00")).toInstant().toEpochMilli();
      } catch (java.time.format.DateTimeParseException unreadable) {
        throw new Refusal(HttpStatus.BAD_REQUEST,
            "\"to\" must be \"beginning\" or an ISO 8601 time with a zone, not " + ControlDoor.cut(to));
      }
    }
    List<Map<String, Object>> moved;
    try {
      moved = listener.rewind(target);
    } catch (Exception unanswered) {
      throw new Refusal(HttpStatus.SERVICE_UNAVAILABLE,
          "the broker did not tell the offsets at that time: " + ControlDoor.cut(String.valueOf(unanswered)));
    }
    Map<String, Object> told = new LinkedHashMap<>();
    told.put("consumer", consumerName);
    told.put("partitions", moved);
    told.put("to_timestamp_ms", target);
    telemetry.emit("rewind", told);
    return Map.of("consumer", consumerName, "partitions", moved);
  }

  @GetMapping(value = "/hold", produces = MediaType.APPLICATION_JSON_VALUE)
  public Map<String, Object> holds() {
    return Map.of("consumer", consumerName, "topics", settings.effectiveTopics(), "held", Map.of());
  }

  @GetMapping(value = "/horizon", produces = MediaType.APPLICATION_JSON_VALUE)
  public Map<String, Object> horizon() {
    double seconds = settings.dedupHorizonDays() * 86_400;
    return Map.of("consumer", consumerName, "seconds", seconds, "configured_seconds", seconds);
  }

  /** The lab controls the Python runtime has (hold a topic back, shorten the horizon): not here. */
  @PostMapping(value = {"/hold", "/horizon"}, produces = MediaType.APPLICATION_JSON_VALUE)
  public Map<String, Object> labOnly(@RequestBody(required = false) byte[] raw) {
    ControlDoor.readJson(raw);
    throw new Refusal(HttpStatus.CONFLICT, "this implementation has no hold or horizon lab controls"
        + " (the Python runtime has them: INVENTORY_IMPL=python)");
  }

  @ExceptionHandler(Refusal.class)
  public ResponseEntity<Map<String, String>> refused(Refusal refusal) {
    return ResponseEntity.status(refusal.status).contentType(MediaType.APPLICATION_JSON)
        .body(Map.of("error", refusal.getMessage()));
  }

  @ExceptionHandler(JacksonException.class)
  public ResponseEntity<Map<String, String>> unreadable(JacksonException error) {
    return ResponseEntity.badRequest().contentType(MediaType.APPLICATION_JSON)
        .body(Map.of("error", "the body is not JSON: " + ControlDoor.cut(error.getOriginalMessage())));
  }

  private static void requireKnown(String point) {
    if (!FaultPoints.RUNTIME_POINTS.contains(point)) {
      throw new Refusal(HttpStatus.BAD_REQUEST, "unknown fault point '" + ControlDoor.cut(point) + "'; known: "
          + String.join(", ", FaultPoints.RUNTIME_POINTS));
    }
  }

  private static String stringField(JsonNode body, String name) {
    JsonNode value = body.get(name);
    if (value == null || !value.isString()) {
      throw new Refusal(HttpStatus.BAD_REQUEST, name + ": Input should be a valid string");
    }
    return value.asString();
  }

  private static double number(JsonNode body, String name, double fallback) {
    JsonNode value = body.get(name);
    if (value == null) {
      return fallback;
    }
    if (!value.isNumber()) {
      throw new Refusal(HttpStatus.BAD_REQUEST, name + ": Input should be a valid number");
    }
    return value.asDouble();
  }
}
