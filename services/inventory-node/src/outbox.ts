/**
 * The outbox writer: an event is added inside the caller's open transaction, so it exists only
 * if the business change commits. The relay publishes it later under the same message id.
 */

import type { Transaction } from "./correctPath.js";
import type { Envelope } from "./envelope.js";

const INSERT = `
INSERT INTO outbox (message_id, aggregate_type, aggregate_key, event_type, event_version, topic,
                    payload, headers, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`;

export async function addToOutbox(
  transaction: Transaction,
  event: Envelope,
  topic: string,
  aggregateType = "order",
): Promise<void> {
  await transaction.query(INSERT, [
    event.messageId,
    aggregateType,
    event.key,
    event.type,
    event.version,
    topic,
    JSON.stringify(event.payload),
    JSON.stringify(event.traceId ? { trace_id: event.traceId } : {}),
    event.occurredAt,
  ]);
}
