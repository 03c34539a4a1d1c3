package effectivelyonce.inventory;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.MeterRegistry;
import java.sql.SQLException;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Named fault points, as the Python runtime has them (effectively_once/faults.py): the control
 * endpoint arms one, and the process really dies there (exit 75, no shutdown hooks), raises,
 * fails as a serialization failure, or stalls. A stall lasts its seconds or until the points are
 * disarmed. Armed points live in memory: a crash forgets them, so "crash once" means once.
 */
public final class FaultPoints {
  public static final int CRASH_EXIT_CODE = 75;
  public static final List<String> RUNTIME_POINTS =
      List.of("before_claim", "after_claim", "before_commit", "after_commit_before_ack");
  public static final List<String> ACTIONS = List.of("crash", "raise", "stall", "serialization_failure");

  private static final Logger log = LoggerFactory.getLogger(FaultPoints.class);

  /** How a point is armed; `remaining` null: every time. */
  public static final class Arming {
    final String action;
    Integer remaining;
    final double probability;
    final double stallSeconds;

    public Arming(String action, Integer remaining, double probability, double stallSeconds) {
      this.action = action;
      this.remaining = remaining;
      this.probability = probability;
      this.stallSeconds = stallSeconds;
    }

    Map<String, Object> describe() {
      Map<String, Object> shown = new LinkedHashMap<>();
      shown.put("action", action);
      shown.put("remaining", remaining);
      shown.put("probability", probability);
      return shown;
    }
  }

  public static final class InjectedFault extends RuntimeException {
    InjectedFault(String message) {
      super(message);
    }
  }

  /** Told (point, action, context) just before an armed point fires; a crash waits for it. */
  @FunctionalInterface
  public interface FireListener {
    void fired(String point, String action, Map<String, Object> context);
  }

  private final Map<String, Arming> armed = new LinkedHashMap<>();
  private final ThreadLocal<Map<String, Object>> context = ThreadLocal.withInitial(Map::of);
  private volatile FireListener onFire = (point, action, inHand) -> { };
  private final Map<String, Integer> fired = new ConcurrentHashMap<>();
  private final MeterRegistry registry;
  private CountDownLatch release = new CountDownLatch(1);

  public FaultPoints(MeterRegistry registry) {
    this.registry = registry;
  }

  public void onFire(FireListener listener) {
    this.onFire = listener;
  }

  /** What any point this thread passes tells about the work in hand (consumer, keys, message ids). */
  public void setContext(Map<String, Object> inHand) {
    context.set(inHand);
  }

  public void clearContext() {
    context.remove();
  }

  public synchronized void arm(String point, Arming arming) {
    armed.put(point, arming);
  }

  /** Disarm one point (null: every point); either way, stalls in progress end now. */
  public synchronized void disarm(String point) {
    if (point == null) {
      armed.clear();
    } else {
      armed.remove(point);
    }
    release.countDown();
    release = new CountDownLatch(1);
  }

  public synchronized Map<String, Object> describeArmed() {
    Map<String, Object> shown = new LinkedHashMap<>();
    armed.forEach((point, arming) -> shown.put(point, arming.describe()));
    return shown;
  }

  public Map<String, Integer> fired() {
    return Map.copyOf(fired);
  }

  /** Arm points from text such as `after_commit_before_ack=crash,before_commit=raise:3`. */
  public void armFromSpec(String spec) {
    for (String item : spec.split(",")) {
      String part = item.trim();
      if (part.isEmpty()) {
        continue;
      }
      String[] pointAndRest = part.split("=", 2);
      String[] actionAndTimes = pointAndRest.length > 1 ? pointAndRest[1].split(":", 2) : new String[] {""};
      if (!ACTIONS.contains(actionAndTimes[0])) {
        throw new ConsumerSettings.SettingsError("EO_FAULTS: cannot read " + part);
      }
      Integer times = 1;
      if (actionAndTimes.length > 1) {
        times = actionAndTimes[1].equals("always") ? null : Integer.valueOf(actionAndTimes[1]);
      }
      arm(pointAndRest[0], new Arming(actionAndTimes[0], times, 1.0, 5.0));
    }
  }

  /** Pass the point: nothing unless it is armed; then crash, raise, or stall. */
  public void hit(String point) throws SQLException {
    Arming arming;
    CountDownLatch stallRelease;
    synchronized (this) {
      arming = armed.get(point);
      if (arming == null) {
        return;
      }
      if (arming.probability < 1 && ThreadLocalRandom.current().nextDouble() >= arming.probability) {
        return;
      }
      if (arming.remaining != null) {
        arming.remaining -= 1;
        if (arming.remaining <= 0) {
          armed.remove(point);
        }
      }
      fired.merge(point, 1, Integer::sum);
      stallRelease = release;
    }
    Counter.builder("eo.faults.fired").description("Injected faults that fired, by fault point.")
        .tag("point", point).register(registry).increment();
    onFire.fired(point, arming.action, context.get());
    switch (arming.action) {
      case "crash" -> {
        log.warn("fault point {}: crashing", point);
        Runtime.getRuntime().halt(CRASH_EXIT_CODE);
      }
      case "raise" -> throw new InjectedFault("injected fault at " + point);
      case "serialization_failure" ->
          throw new SQLException("injected serialization failure at " + point, "40001");
      case "stall" -> {
        log.warn("fault point {}: stalling {} s", point, arming.stallSeconds);
        try {
          stallRelease.await((long) (arming.stallSeconds * 1000), TimeUnit.MILLISECONDS);
        } catch (InterruptedException interrupted) {
          Thread.currentThread().interrupt();
        }
      }
      default -> throw new IllegalStateException(arming.action);
    }
  }
}
