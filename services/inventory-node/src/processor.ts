/**
 * Around the correct path: which messages it may take, retries, and what became of each.
 *
 * It knows nothing of Kafka. SQLSTATE 40001 and 40P01 retry the whole transaction under the same
 * message id (bounded, full-jitter backoff); any other handler error is retried a few times; a
 * NonRetryable error, a handler that ended the transaction, an unknown type or a message older
 * than the dedup horizon is a TerminalFailure (dead-lettered by the loop); a lost database
 * session is RetryLater (nothing acknowledged, the same message again).
 */

import type { Pool, PoolClient } from "pg";

import { type Handler, HandlerBrokeTransaction, type IsolationLevel, type Result, attempt, committed } from "./correctPath.js";
import { type Envelope, idTime } from "./envelope.js";
import type { FaultPoints } from "./faults.js";
import { log } from "./log.js";
import { NO_TELEMETRY, type Telemetry } from "./telemetry.js";
import { CLAIM_WAIT_SECONDS, OUTCOMES, type Outcome, RETRIES, ROLLBACKS, TRANSACTION_SECONDS, precreate } from "./metrics.js";

/** Thrown by a handler for a failure no retry can fix: dead-lettered at the first attempt. */
export class NonRetryable extends Error {}

/** This message cannot be applied: dead-letter it with its reason, then acknowledge it. */
export class TerminalFailure extends Error {
  readonly errorClass: string;
  readonly errorText: string;

  constructor(
    readonly reason: string,
    error: unknown,
  ) {
    const errorClass = error instanceof Error ? error.constructor.name : "Refused";
    const errorText = String(error instanceof Error ? error.message : error).slice(0, 2000);
    super(`${reason}: ${errorClass}: ${errorText}`);
    this.errorClass = errorClass;
    this.errorText = errorText;
  }
}

/** Not the message's fault (the database went away): acknowledge nothing, try it again. */
export class RetryLater extends Error {}

export interface ProcessorConfig {
  consumerName: string;
  isolationLevel: IsolationLevel;
  ignoredTypes: ReadonlySet<string>;
  dedupHorizonMs: number | null;
  maxTransactionAttempts: number;
  maxHandlerAttempts: number;
  backoffBaseMs: number;
  backoffCapMs: number;
}

const TRANSACTION_RETRY_CAUSES: Record<string, string> = { "40001": "SerializationFailure", "40P01": "DeadlockDetected" };

function sqlstate(error: unknown): string {
  return typeof error === "object" && error !== null && "code" in error ? String(error.code) : "";
}

/** The session is gone: a socket error (ECONNRESET…), the client's own word that its connection
 * ended, or the server ending the session (SQLSTATE class 57P or 08). */
function connectionLost(error: unknown): boolean {
  const code = sqlstate(error);
  if (code.startsWith("57P") || code.startsWith("08") || /^E[A-Z]+$/.test(code)) return true;
  const message = error instanceof Error ? error.message : "";
  return code === "" && /Connection terminated|not queryable|connection error/i.test(message);
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export class MessageProcessor {
  constructor(
    readonly config: ProcessorConfig,
    private readonly pool: Pool,
    private readonly handlers: ReadonlyMap<string, Handler>,
    private readonly faults: FaultPoints,
    private readonly telemetry: Telemetry = NO_TELEMETRY,
  ) {
    precreate(config.consumerName, handlers.keys());
  }

  /** Apply `event` once: "applied", "duplicate" or "ignored"; or throw TerminalFailure or RetryLater. */
  async process(event: Envelope): Promise<Outcome> {
    if (this.config.ignoredTypes.has(event.type)) {
      this.record(event.type, "ignored", event);
      return "ignored";
    }
    let handler: Handler;
    try {
      handler = this.eligible(event);
    } catch (refused) {
      // A copy of a message applied before is a duplicate whatever it carries: its id decides.
      const duplicate = await committed(this.pool, this.config.consumerName, event).catch(() => null);
      if (duplicate === null) throw refused;
      this.recordResult(event, duplicate);
      return duplicate.outcome;
    }
    let transactionAttempts = 0;
    let handlerAttempts = 0;
    for (;;) {
      const started = performance.now();
      try {
        const result = await this.run(event, handler);
        TRANSACTION_SECONDS.labels(this.config.consumerName).observe((performance.now() - started) / 1000);
        this.recordResult(event, result);
        return result.outcome;
      } catch (error) {
        ROLLBACKS.labels(this.config.consumerName).inc();
        this.record(event.type, "retryable_failure", event, { error_class: (error as Error)?.constructor?.name });
        if (error instanceof HandlerBrokeTransaction) throw new TerminalFailure("handler_broke_transaction", error);
        if (connectionLost(error)) throw new RetryLater(String((error as Error)?.message ?? error));
        const cause = TRANSACTION_RETRY_CAUSES[sqlstate(error)];
        if (cause !== undefined) {
          transactionAttempts += 1;
          if (transactionAttempts >= this.config.maxTransactionAttempts) {
            throw new TerminalFailure("transaction_retries_exhausted", error);
          }
          RETRIES.labels(this.config.consumerName, cause).inc();
          await this.backoff(transactionAttempts);
          continue;
        }
        handlerAttempts += 1;
        if (error instanceof NonRetryable || handlerAttempts >= this.config.maxHandlerAttempts) {
          throw new TerminalFailure("handler_failed", error);
        }
        RETRIES.labels(this.config.consumerName, "handler_error").inc();
        await this.backoff(handlerAttempts);
      }
    }
  }

  private eligible(event: Envelope): Handler {
    const handler = this.handlers.get(event.type);
    if (handler === undefined) throw new TerminalFailure("unknown_type", `no handler for event type '${event.type}'`);
    const horizon = this.config.dedupHorizonMs;
    // As the markers' retention counts a message's age: from the time its id carries (a UUIDv7's,
    // which no copy can change), else, for an untimed id, from its occurred_at.
    const minted = idTime(event.messageId);
    const born = minted ?? Date.parse(event.occurredAt);
    if (horizon !== null && born < Date.now() - horizon) {
      const what = minted !== null ? "its id was minted at" : "occurred at";
      throw new TerminalFailure(
        "beyond_dedup_horizon",
        `${what} ${new Date(born).toISOString()}, older than the ${horizon / 1000} s the markers are kept: ` +
          "applying it could repeat an effect whose marker was purged",
      );
    }
    return handler;
  }

  /** One attempt on a client checked out for it alone; a client that failed is destroyed, not reused. */
  private async run(event: Envelope, handler: Handler): Promise<Result> {
    let client: PoolClient;
    try {
      client = await this.pool.connect();
    } catch (error) {
      throw new RetryLater(`no database connection: ${(error as Error).message}`);
    }
    let broken: Error | undefined;
    try {
      return await attempt(
        {
          client,
          consumerName: this.config.consumerName,
          isolationLevel: this.config.isolationLevel,
          hit: (point) => this.faults.hit(point),
          onClaim: (seconds) => CLAIM_WAIT_SECONDS.labels(this.config.consumerName).observe(seconds),
        },
        event,
        handler,
      );
    } catch (error) {
      if (connectionLost(error) || error instanceof HandlerBrokeTransaction) broken = error as Error;
      throw error;
    } finally {
      client.release(broken);
    }
  }

  private async backoff(attemptNumber: number): Promise<void> {
    const ceiling = Math.min(this.config.backoffCapMs, this.config.backoffBaseMs * 2 ** attemptNumber);
    await sleep(Math.random() * ceiling);
  }

  /** A transaction's result: a copy with other content names its differing fields, never their values. */
  private recordResult(event: Envelope, result: Result): void {
    const fields = result.differingFields.length > 0 ? { differing_fields: result.differingFields } : {};
    this.record(event.type, result.outcome, event, fields);
  }

  /** Count an outcome, tell it (telemetry) and log it (with ids, never the payload). */
  record(eventType: string, outcome: Outcome, event: Envelope | null, fields: Record<string, unknown> = {}): void {
    OUTCOMES.labels(this.config.consumerName, eventType, outcome, "correct").inc();
    const told = {
      consumer: this.config.consumerName,
      strategy: "correct",
      message_id: event?.messageId ?? null,
      key: event?.key ?? null,
      event_type: eventType,
      outcome,
      ...fields,
    };
    this.telemetry.emit("delivery", told);
    const line = { ...told, trace_id: event?.traceId ?? null };
    // As the Python runtime: a delivery that went as it should is logged at DEBUG only.
    if (outcome === "applied" || outcome === "duplicate" || outcome === "ignored") log.debug(`message ${outcome}`, line);
    else log.warn(`message ${outcome}`, line);
  }
}
