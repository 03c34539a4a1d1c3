/**
 * The correct path, alone: claim → handler → commit, on ONE checked-out client.
 *
 * node-postgres runs every query of a transaction on whichever client sent BEGIN, so the path
 * checks a client out of the pool, sends BEGIN, the claim, the handler's statements and COMMIT
 * on it, and only then gives it back. (pool.query() would take any idle client: the claim and
 * the business change could land in different sessions, and COMMIT in a third.)
 *
 * The marker is claimed with INSERT … ON CONFLICT DO NOTHING: a duplicate inserts nothing and
 * commits an empty transaction; a concurrent copy waits on the unique index until the first
 * commits (then it is a duplicate, or 40001 under snapshot isolation) or rolls back (then it
 * claims). Only after COMMIT resolved may the consumer loop commit the Kafka offset.
 */

import type { PoolClient, QueryResult, QueryResultRow } from "pg";

import type { Envelope } from "./envelope.js";

/** Consumer, message id and the message's occurred_at: markers are partitioned by the day their
 * message occurred, so the key holds it. */
export const CLAIM =
  "INSERT INTO processed_message (consumer_name, message_id, occurred_at) VALUES ($1, $2, $3::timestamptz) " +
  "ON CONFLICT DO NOTHING RETURNING message_id";

/** The same, while markers from before that partitioning remain in processed_message_legacy
 * (after an upgrade, until retention empties it): about 60 µs more a claim. */
export const CLAIM_BESIDE_LEGACY =
  "INSERT INTO processed_message (consumer_name, message_id, occurred_at) " +
  "SELECT m.c, m.id, m.at FROM (VALUES ($1::text, $2::text, $3::timestamptz)) AS m (c, id, at) " +
  "WHERE NOT EXISTS (SELECT FROM processed_message_legacy l WHERE l.consumer_name = m.c AND l.message_id = m.id) " +
  "ON CONFLICT DO NOTHING RETURNING message_id";

/** Whether markers from before the partitioning remain: their table becomes an empty view once
 * retention empties it, and stays one, so a process asks once. Run outside any transaction. */
export async function legacyMarkersRemain(client: PoolClient): Promise<boolean> {
  const result = await client.query<{ remain: boolean | null }>(
    "SELECT relkind = 'r' AS remain FROM pg_class WHERE oid = to_regclass('processed_message_legacy')",
  );
  return result.rows[0]?.remain === true;
}

export const ISOLATION_LEVELS = ["READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"] as const;
export type IsolationLevel = (typeof ISOLATION_LEVELS)[number];

/** What a handler sees of the transaction: statements, and nothing that could end it. */
export interface Transaction {
  query<R extends QueryResultRow = QueryResultRow>(text: string, values?: unknown[]): Promise<QueryResult<R>>;
}

/** A service's business logic: it receives the event and the open transaction. */
export type Handler = (event: Envelope, transaction: Transaction) => Promise<void>;

/** The handler ended the transaction: the message fails (dead-lettered). */
export class HandlerBrokeTransaction extends Error {}

/** A statement inside the handler failed and the handler carried on: the transaction is aborted. */
export class TransactionAborted extends Error {}

export interface Attempt {
  client: PoolClient;
  consumerName: string;
  isolationLevel: IsolationLevel;
  /** CLAIM, or CLAIM_BESIDE_LEGACY while legacyMarkersRemain. */
  claim: string;
  hit: (point: string) => Promise<void>;
  onClaim: (seconds: number) => void;
}

type Status = "I" | "T" | "E";

/** The server's own word on the session after every statement (ReadyForQuery: Idle, in a
 * Transaction, or in a failed transaction Error), as libpq's PQtransactionStatus reads it. */
export function transactionStatus(client: PoolClient): () => Status {
  const tracked = client as PoolClient & { eoStatus?: Status; connection: NodeJS.EventEmitter };
  if (tracked.eoStatus === undefined) {
    tracked.eoStatus = "I";
    tracked.connection.on("readyForQuery", (message: { status: Status }) => {
      tracked.eoStatus = message.status;
    });
  }
  return () => tracked.eoStatus ?? "I";
}

function checkStillOpen(status: Status): void {
  if (status === "I") {
    throw new HandlerBrokeTransaction("the handler ended the transaction (a COMMIT or ROLLBACK)");
  }
  if (status === "E") {
    throw new TransactionAborted("a statement in the handler failed and the transaction is aborted");
  }
}

function guarded(client: PoolClient, status: () => Status): Transaction {
  return {
    async query<R extends QueryResultRow>(text: string, values?: unknown[]) {
      const result = await client.query<R>(text, values);
      if (status() === "I") checkStillOpen("I");
      return result;
    },
  };
}

/** One attempt at one message: "applied" or "duplicate" once COMMIT resolved; throws otherwise
 * (after ROLLBACK, or with the client broken). */
export async function attempt(run: Attempt, event: Envelope, handler: Handler): Promise<"applied" | "duplicate"> {
  const { client } = run;
  const status = transactionStatus(client);
  await client.query(`BEGIN ISOLATION LEVEL ${run.isolationLevel}`);
  try {
    await run.hit("before_claim");
    const started = performance.now();
    const claimed = await client.query(run.claim, [run.consumerName, event.messageId, event.occurredAt]);
    run.onClaim((performance.now() - started) / 1000);
    if (claimed.rowCount === 0) {
      await client.query("COMMIT"); // the empty transaction
      return "duplicate";
    }
    await run.hit("after_claim");
    await handler(event, guarded(client, status));
    checkStillOpen(status());
    await run.hit("before_commit");
    await client.query("COMMIT");
    return "applied";
  } catch (error) {
    if (status() !== "I") await client.query("ROLLBACK").catch(() => undefined);
    throw error;
  }
}
