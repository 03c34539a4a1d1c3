/**
 * Inventory's handlers: each runs inside the consumer's transaction, with its marker. The same
 * SQL, business keys and outbox events as the Python service (services/inventory/handlers.py).
 */

import type { Handler, Transaction } from "../correctPath.js";
import { type Envelope, newEnvelope } from "../envelope.js";
import { addToOutbox } from "../outbox.js";
import { NonRetryable } from "../processor.js";
import { readOrderPlaced } from "./orderPlaced.js";

export const ORDERS_EVENTS = "orders.events";
export const INVENTORY_EVENTS = "inventory.events";
export const PAYMENT_EVENTS = "payment.events";
export const TOPICS = [ORDERS_EVENTS, PAYMENT_EVENTS] as const;

/** The saga's event types that share inventory's topics but are none of its business. */
export const IGNORED_TYPES = new Set([
  "InventoryReserved",
  "InventoryReservationFailed",
  "InventoryReleased",
  "NotificationSent",
  "NotificationFailed",
]);

/** A business outcome, not a failure: the order is refused and the refusal is an event. */
class OutOfStock extends Error {}

async function emit(
  transaction: Transaction,
  type: string,
  orderId: string,
  payload: Record<string, unknown>,
  traceId: string | null,
): Promise<void> {
  await addToOutbox(transaction, newEnvelope(type, orderId, payload, traceId), INVENTORY_EVENTS);
}

/** The order's one decision, claimed before anything else (inventory migration 0002): a row back
 * when this message may decide it (the first; or this very message again, which only a consumer
 * whose marker did not guard it sees); none for the same order under another message id. */
const DECIDE = `INSERT INTO reservation_decision (order_id, decided_by) VALUES ($1, $2)
                ON CONFLICT (order_id) DO UPDATE SET decided_by = excluded.decided_by
                 WHERE reservation_decision.decided_by = excluded.decided_by
                RETURNING order_id`;
const DECIDED = "UPDATE reservation_decision SET outcome = $1, reason = $2 WHERE order_id = $3";

/** OrderPlaced: reserve every line, or none of them and say why; once per order, whatever ids its
 * OrderPlaced comes under. A payload that does not fit the saga's contract is refused (dead
 * letter, with the field named). */
export const reserveStock: Handler = async (event, transaction) => {
  const orderId = event.key;
  let order;
  try {
    order = readOrderPlaced(event.payload);
  } catch (error) {
    throw new NonRetryable((error as Error).message);
  }
  const decision = await transaction.query(DECIDE, [orderId, event.messageId]);
  if (decision.rowCount === 0) return; // decided already, under another message id: a semantic duplicate changes nothing
  await transaction.query("SAVEPOINT reserve"); // a shortfall undoes only the reservations
  try {
    for (const { sku, quantity } of [...order.lines].sort(bySku)) {  // stock rows locked in one order
      const fresh = await transaction.query(
        `INSERT INTO reservation (order_id, sku, quantity, status)
         SELECT $1, $2, $3, 'reserved' WHERE EXISTS (SELECT 1 FROM stock WHERE sku = $2)
         ON CONFLICT (order_id, sku) DO NOTHING RETURNING sku`,
        [orderId, sku, quantity],
      );
      if (fresh.rowCount === 0) {
        const known = await transaction.query("SELECT 1 FROM stock WHERE sku = $1", [sku]);
        if (known.rowCount === 0) throw new OutOfStock(`unknown SKU ${sku}`);
        continue; // the same SKU twice in one order: reserved with its first line
      }
      const taken = await transaction.query(
        `UPDATE stock SET available = available - $1, reserved = reserved + $1
          WHERE sku = $2 AND available >= $1 RETURNING sku`,
        [quantity, sku],
      );
      if (taken.rowCount === 0) throw new OutOfStock(`not enough ${sku} for ${quantity}`);
    }
    await transaction.query("RELEASE SAVEPOINT reserve");
  } catch (error) {
    if (!(error instanceof OutOfStock)) throw error;
    await transaction.query("ROLLBACK TO SAVEPOINT reserve");
    await transaction.query(DECIDED, ["refused", error.message, orderId]);
    await emit(transaction, "InventoryReservationFailed", orderId, { order_id: orderId, reason: error.message }, event.traceId);
    return;
  }
  await transaction.query(DECIDED, ["reserved", null, orderId]);
  await emit(
    transaction,
    "InventoryReserved",
    orderId,
    {
      order_id: orderId,
      lines: event.payload["lines"],
      amount_cents: order.amount_cents,
      customer_email: order.customer_email,
      payment_method: order.payment_method,
    },
    event.traceId,
  );
};

/** Move the order's live reservations to `status`; the SKUs and quantities moved. */
async function settle(transaction: Transaction, orderId: string, status: string): Promise<Array<[string, number]>> {
  const moved = await transaction.query<{ sku: string; quantity: number }>(
    `UPDATE reservation SET status = $1, updated_at = now()
      WHERE order_id = $2 AND status = 'reserved' RETURNING sku, quantity`,
    [status, orderId],
  );
  return moved.rows.map((row): [string, number] => [row.sku, Number(row.quantity)]).sort(([a], [b]) => bySku({ sku: a }, { sku: b }));
}

/** SKU order: every handler locks stock rows in it, so two transactions on orders of the same
 * SKUs wait for each other instead of deadlocking. */
function bySku(a: { sku: string }, b: { sku: string }): number {
  return a.sku < b.sku ? -1 : a.sku > b.sku ? 1 : 0;
}

/** PaymentFailed: give the reserved units back, once, and say so. */
export const releaseStock: Handler = async (event: Envelope, transaction) => {
  const released = await settle(transaction, event.key, "released");
  for (const [sku, quantity] of released) {
    await transaction.query("UPDATE stock SET available = available + $1, reserved = reserved - $1 WHERE sku = $2", [
      quantity,
      sku,
    ]);
  }
  if (released.length > 0) {
    await emit(
      transaction,
      "InventoryReleased",
      event.key,
      { order_id: event.key, lines: released.map(([sku, quantity]) => ({ sku, quantity })) },
      event.traceId,
    );
  }
};

/** PaymentAuthorized: the reserved units are sold. */
export const sellStock: Handler = async (event: Envelope, transaction) => {
  for (const [sku, quantity] of await settle(transaction, event.key, "sold")) {
    await transaction.query("UPDATE stock SET reserved = reserved - $1, sold = sold + $1 WHERE sku = $2", [quantity, sku]);
  }
};

export const HANDLERS: ReadonlyMap<string, Handler> = new Map([
  ["OrderPlaced", reserveStock],
  ["PaymentFailed", releaseStock],
  ["PaymentAuthorized", sellStock],
]);
