/**
 * The correct path, alone: claim → handler → commit, on ONE checked-out client.
 *
 * node-postgres runs every query of a transaction on whichever client sent BEGIN, so the path
 * checks a client out of the pool, sends BEGIN, the claim, the handler's statements and COMMIT
 * on it, and only then gives it back. (pool.query() would take any idle client: the claim and
 * the business change could land in different sessions, and COMMIT in a third.)
 *
 * The marker is claimed with INSERT … ON CONFLICT DO NOTHING on (consumer, message id): a duplicate
 * inserts nothing, asks how its content differs from the copy applied under its id (a copy with
 * other content is counted apart) and commits an empty transaction; a concurrent copy waits on
 * the unique index until the first commits (then it is a duplicate, or 40001 under snapshot
 * isolation) or rolls back (then it claims). Only after COMMIT resolved may the consumer loop
 * commit the Kafka offset.
 */

import type { PoolClient, QueryResult, QueryResultRow } from "pg";

import { type Envelope, bodyOf } from "./envelope.js";

/** The claim. Its key is (consumer, message id): id_time is the time the id itself carries (a CHECK
 * ties the two, migration 0008), and the content digest only tells a copy apart. */
export const CLAIM =
  "INSERT INTO processed_message (consumer_name, message_id, id_time, content_digest) " +
  "VALUES ($1, $2, message_id_time($2), message_content_digest($3::jsonb, $4::jsonb)) " +
  "ON CONFLICT DO NOTHING RETURNING message_id";

/** How a copy's content differs from the one applied under its id (NULL: the marker kept no digest). */
export const DIFFERENCES =
  "SELECT message_content_differences(content_digest, message_content_digest($3::jsonb, $4::jsonb)) AS fields " +
  "FROM processed_message WHERE consumer_name = $1 AND message_id = $2 AND id_time = message_id_time($2)";

/** A duplicate's outcome when `consumerName`'s marker for `event` is committed (a copy with other
 * content names its differing fields), or null when there is none. */
export async function committed(
  client: Pick<PoolClient, "query">,
  consumerName: string,
  event: Envelope,
): Promise<Result | null> {
  const found = await client.query<{ fields: string[] | null }>(DIFFERENCES, [
    consumerName,
    event.messageId,
    bodyOf(event),
    event.delivery,
  ]);
  if (found.rowCount === 0) return null;
  const differing = found.rows[0]?.fields ?? [];
  return differing.length > 0
    ? { outcome: "duplicate_with_different_content", differingFields: differing }
    : { outcome: "duplicate", differingFields: [] };
}

/** What one attempt came to, and for a copy with other content, the fields that differ. */
export interface Result {
  outcome: "applied" | "duplicate" | "duplicate_with_different_content";
  differingFields: string[];
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

/** One attempt at one message: applied or a duplicate once COMMIT resolved; throws otherwise
 * (after ROLLBACK, or with the client broken). */
export async function attempt(run: Attempt, event: Envelope, handler: Handler): Promise<Result> {
  const { client } = run;
  const status = transactionStatus(client);
  await client.query(`BEGIN ISOLATION LEVEL ${run.isolationLevel}`);
  try {
    await run.hit("before_claim");
    const started = performance.now();
    const content = [bodyOf(event), event.delivery];
    const claimed = await client.query(CLAIM, [run.consumerName, event.messageId, ...content]);
    run.onClaim((performance.now() - started) / 1000);
    if (claimed.rowCount === 0) {
      const duplicate = await committed(client, run.consumerName, event);
      await client.query("COMMIT"); // the empty transaction
      return duplicate ?? { outcome: "duplicate", differingFields: [] };
    }
    await run.hit("after_claim");
    await handler(event, guarded(client, status));
    checkStillOpen(status());
    await run.hit("before_commit");
    await client.query("COMMIT");
    return { outcome: "applied", differingFields: [] };
  } catch (error) {
    if (status() !== "I") await client.query("ROLLBACK").catch(() => undefined);
    throw error;
  }
}
