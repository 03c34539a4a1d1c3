package effectivelyonce.inventory;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.stereotype.Component;

/**
 * Inventory's handlers: each runs inside the consumer's transaction, with its marker. The same
 * SQL, business keys and outbox events as the Python service (services/inventory/handlers.py).
 */
@Component
public class InventoryHandlers {
  static final String INVENTORY_EVENTS = "inventory.events";

  /** The saga's event types that share inventory's topics but are none of its business. */
  public static final Set<String> IGNORED_TYPES = Set.of(
      "InventoryReserved", "InventoryReservationFailed", "InventoryReleased", "NotificationSent",
      "NotificationFailed");

  /** A business outcome, not a failure: the order is refused and the refusal is an event. */
  private static final class OutOfStock extends RuntimeException {
    OutOfStock(String message) {
      super(message);
    }
  }

  public Map<String, Handler> handlers() {
    Map<String, Handler> handlers = new LinkedHashMap<>();
    handlers.put("OrderPlaced", this::reserveStock);
    handlers.put("PaymentFailed", this::releaseStock);
    handlers.put("PaymentAuthorized", this::sellStock);
    return Map.copyOf(handlers);
  }

  private static void emit(JdbcTemplate transaction, String type, String orderId, Map<String, Object> payload,
      String traceId) {
    Outbox.add(transaction, Envelope.create(type, orderId, payload, traceId), INVENTORY_EVENTS);
  }

  /**
   * The order's one decision, claimed before anything else (inventory migration 0002): a row back
   * when this message may decide it (the first; or this very message again, which only a consumer
   * whose marker did not guard it sees); none for the same order under another message id.
   */
  static final String DECIDE = """
      INSERT INTO reservation_decision (order_id, decided_by) VALUES (?, ?)
      ON CONFLICT (order_id) DO UPDATE SET decided_by = excluded.decided_by
       WHERE reservation_decision.decided_by = excluded.decided_by
      RETURNING order_id""";
  static final String DECIDED = "UPDATE reservation_decision SET outcome = ?, reason = ? WHERE order_id = ?";

  /** OrderPlaced: reserve every line, or none of them and say why; once per order, whatever ids its
   * OrderPlaced comes under. A payload that does not fit the saga's contract is refused (dead
   * letter, with the field named). */
  void reserveStock(Envelope event, JdbcTemplate transaction) {
    String orderId = event.key();
    OrderPlacedPayload order;
    try {
      order = OrderPlacedPayload.read(event.payload());
    } catch (OrderPlacedPayload.Misfit misfit) {
      throw new Handler.NonRetryable(misfit.getMessage());
    }
    if (transaction.queryForList(DECIDE, String.class, orderId, event.messageId()).isEmpty()) {
      return; // decided already, under another message id: a semantic duplicate changes nothing
    }
    transaction.execute("SAVEPOINT reserve"); // a shortfall undoes only the reservations
    try {
      // Stock rows locked in SKU order in every handler: concurrent orders wait, never deadlock.
      for (OrderPlacedPayload.Line line : order.lines().stream().sorted(Comparator.comparing(OrderPlacedPayload.Line::sku)).toList()) {
        List<String> fresh = transaction.queryForList("""
            INSERT INTO reservation (order_id, sku, quantity, status)
            SELECT ?, ?, ?, 'reserved' WHERE EXISTS (SELECT 1 FROM stock WHERE sku = ?)
            ON CONFLICT (order_id, sku) DO NOTHING RETURNING sku""",
            String.class, orderId, line.sku(), line.quantity(), line.sku());
        if (fresh.isEmpty()) {
          if (transaction.queryForList("SELECT 1 FROM stock WHERE sku = ?", Integer.class, line.sku()).isEmpty()) {
            throw new OutOfStock("unknown SKU " + line.sku());
          }
          continue; // the same SKU twice in one order: reserved with its first line
        }
        List<String> taken = transaction.queryForList("""
            UPDATE stock SET available = available - ?, reserved = reserved + ?
             WHERE sku = ? AND available >= ? RETURNING sku""",
            String.class, line.quantity(), line.quantity(), line.sku(), line.quantity());
        if (taken.isEmpty()) {
          throw new OutOfStock("not enough " + line.sku() + " for " + line.quantity());
        }
      }
      transaction.execute("RELEASE SAVEPOINT reserve");
    } catch (OutOfStock shortfall) {
      transaction.execute("ROLLBACK TO SAVEPOINT reserve");
      transaction.update(DECIDED, "refused", shortfall.getMessage(), orderId);
      emit(transaction, "InventoryReservationFailed", orderId,
          Map.of("order_id", orderId, "reason", shortfall.getMessage()), event.traceId());
      return;
    }
    transaction.update(DECIDED, "reserved", null, orderId);
    Map<String, Object> reserved = new LinkedHashMap<>();
    reserved.put("order_id", orderId);
    reserved.put("lines", event.payload().get("lines"));
    reserved.put("amount_cents", order.amountCents());
    reserved.put("customer_email", order.customerEmail());
    reserved.put("payment_method", order.paymentMethod());
    emit(transaction, "InventoryReserved", orderId, reserved, event.traceId());
  }

  /** Move the order's live reservations to `status`; the SKUs and quantities moved. */
  private static List<Map<String, Object>> settle(JdbcTemplate transaction, String orderId, String status) {
    return transaction.queryForList("""
        UPDATE reservation SET status = ?, updated_at = now()
         WHERE order_id = ? AND status = 'reserved' RETURNING sku, quantity""", status, orderId)
        .stream().sorted(Comparator.comparing(row -> String.valueOf(row.get("sku")))).toList();
  }

  /** PaymentFailed: give the reserved units back, once, and say so. */
  void releaseStock(Envelope event, JdbcTemplate transaction) {
    List<Map<String, Object>> released = settle(transaction, event.key(), "released");
    List<Map<String, Object>> lines = new ArrayList<>();
    for (Map<String, Object> row : released) {
      transaction.update("UPDATE stock SET available = available + ?, reserved = reserved - ? WHERE sku = ?",
          row.get("quantity"), row.get("quantity"), row.get("sku"));
      lines.add(Map.of("sku", row.get("sku"), "quantity", row.get("quantity")));
    }
    if (!released.isEmpty()) {
      emit(transaction, "InventoryReleased", event.key(), Map.of("order_id", event.key(), "lines", lines),
          event.traceId());
    }
  }

  /** PaymentAuthorized: the reserved units are sold. */
  void sellStock(Envelope event, JdbcTemplate transaction) {
    for (Map<String, Object> row : settle(transaction, event.key(), "sold")) {
      transaction.update("UPDATE stock SET reserved = reserved - ?, sold = sold + ? WHERE sku = ?",
          row.get("quantity"), row.get("quantity"), row.get("sku"));
    }
  }
}
