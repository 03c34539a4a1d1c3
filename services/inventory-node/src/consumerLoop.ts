/**
 * The Kafka loop: take a message, run it through the processor, and only then acknowledge it.
 *
 * Acknowledging is recording the message's next offset as its partition's, once its transaction
 * committed (applied, duplicate) or the broker confirmed its dead letter (terminal failure); the
 * next message is taken only after that. What is recorded is committed to the group every second
 * (ACK_COMMIT_INTERVAL_MS) and whenever the loop leaves its stream (a rewind, a stop): one broker
 * round trip covers many messages, as librdkafka's background commit of stored offsets does for the
 * Python runtime. A crash before the commit, even right after COMMIT, redelivers the messages and
 * the markers make them duplicates. A lost database session acknowledges nothing: the same message
 * is tried again until the database answers. The client heartbeats on a timer of its own, so a
 * transaction waiting on another's claim keeps the member in its group. A commit the group refuses
 * (the partition moved to another member) is logged: the new owner is delivered those messages
 * again, and the markers make them duplicates.
 */

import type { Consumer, Message, MessagesStream } from "@platformatic/kafka";

import type { DeadLetterPublisher } from "./deadLetters.js";
import { type Envelope, PoisonMessage, type RecordHeaders, decode, decodeRecord } from "./envelope.js";
import type { FaultPoints } from "./faults.js";
import { log } from "./log.js";
import { type MessageProcessor, RetryLater, TerminalFailure } from "./processor.js";
import { rewindTarget } from "./rewindTarget.js";

export type KafkaConsumer = Consumer<Buffer, Buffer, Buffer, Buffer>;
type Record_ = Message<Buffer, Buffer, Buffer, Buffer>;
type Stream = MessagesStream<Buffer, Buffer, Buffer, Buffer>;

/** The event's ids for what a fault point tells, or null for a message that does not decode. */
function peek(value: Buffer | null): Envelope | null {
  try {
    return decode(value);
  } catch {
    return null;
  }
}

/** The record's headers by name, each name's values in their order (a name may come twice). */
export function recordHeaders(headers: Map<Buffer, Buffer>): RecordHeaders {
  const byName: Record<string, Buffer[]> = {};
  for (const [name, value] of headers) (byName[name.toString()] ??= []).push(value);
  return byName;
}

/** The Kafka protocol errors (by name: UNRELEASED_INSTANCE_ID, ...) an error of the client carries. */
export function protocolErrors(error: unknown): string[] {
  const found: string[] = [];
  const visit = (value: unknown, depth: number) => {
    if (depth > 4 || typeof value !== "object" || value === null) return;
    const { apiId, errors, cause } = value as { apiId?: unknown; errors?: unknown; cause?: unknown };
    if (typeof apiId === "string") found.push(apiId);
    if (Array.isArray(errors)) for (const inner of errors) visit(inner, depth + 1);
    visit(cause, depth + 1);
  };
  visit(error, 0);
  return found;
}

/** How often acknowledged offsets are committed while the loop consumes. */
export const ACK_COMMIT_INTERVAL_MS = 1000;

/** How long a rewind waits for a member still joining: refused its static id after a restart, it
 * holds no partition to move until the broker lets the killed process's id go (the Python
 * runtime's JOINING_GRACE_SECONDS). */
export const JOINING_GRACE_MS = 15_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface Moved {
  topic: string;
  partition: number;
  offset: string | number;
}

export class ConsumerLoop {
  private stopping = false;
  private stream: Stream | null = null;
  /** Resolves when the loop has left its stream (set while one is open). */
  private left: Promise<void> = Promise.resolve();
  /** While set, the loop waits for it before it opens its stream again (a rewind in progress). */
  private held: Promise<void> | null = null;
  /** Each partition's next offset to commit: after its last acknowledged message. */
  private acknowledged = new Map<string, { topic: string; partition: number; offset: bigint; leaderEpoch: number }>();
  /** The commit under way, if any: commits go one at a time. */
  private committing: Promise<void> = Promise.resolve();
  /** When the group first refused this member its instance id; null if it never did. */
  private refusedSince: number | null = null;
  /** Whether the member ever held a partition. */
  private everAssigned = false;
  /** Whether the loop is opening its stream (joining the group). */
  private opening = false;

  constructor(
    private readonly consumer: KafkaConsumer,
    private readonly processor: MessageProcessor,
    private readonly deadLetters: DeadLetterPublisher,
    private readonly faults: FaultPoints,
    private readonly refusedJoinWaitMs = 60_000,
    private readonly retryCapMs = 5000,
  ) {}

  /** Move this member's partitions back to a time (null: the beginning): what follows is delivered
   * again, and the markers make it duplicates. Never forward (rewindTarget): a partition the member
   * has not reached the time in, or with nothing at the time, stays at the group's committed offset.
   * A member still joining its group (opening its stream, or refused its static id after a restart)
   * is served once it joined, or after JOINING_GRACE_MS. The loop leaves its stream first (the
   * message in hand is finished and acknowledged), the group's offsets are committed back, and the
   * loop consumes again from them. */
  async rewind(toTimestampMs: number | null): Promise<Moved[]> {
    log.info("rewind asked; the member leaves its stream once the message in hand is acknowledged", {
      consumer: this.processor.config.consumerName,
    });
    const asked = Date.now();
    while ((this.opening || this.refusedAndJoining()) && Date.now() - asked < JOINING_GRACE_MS) await sleep(100);
    let release = () => undefined as void;
    this.held = new Promise<void>((resolve) => {
      release = resolve;
    });
    try {
      // As when the loop leaves on its own or stops: a close that ends in an error (a fetch under
      // way when the stream's connections closed) still closed it, and `left` says when the loop
      // is out. Awaited bare, that error failed the rewind (a 500) with nothing moved.
      await this.stream?.close().catch((error: unknown) => {
        log.info("the stream closed with an error; the rewind goes on", { error: (error as Error).message });
      });
      await this.left;
      const assigned = (this.consumer.assignments ?? []).filter((a) => a.partitions.length > 0);
      const topics = assigned.map((a) => a.topic);
      if (topics.length === 0) return [];
      const lows = await this.consumer.listOffsets({ topics, timestamp: -2n });
      const found = toTimestampMs === null ? null : await this.consumer.listOffsets({ topics, timestamp: BigInt(toTimestampMs) });
      const committed = await this.consumer.listCommittedOffsets({ topics: assigned });
      const moved: Moved[] = [];
      const offsets = [];
      for (const { topic, partitions } of assigned) {
        for (const partition of partitions) {
          const atTime = found === null ? null : (found.get(topic)?.[partition] ?? -1n);
          const stands = committed.get(topic)?.[partition];
          const target = rewindTarget(atTime, stands === undefined || stands < 0n ? null : stands);
          const offset = target ?? lows.get(topic)?.[partition] ?? 0n;
          offsets.push({ topic, partition, offset, leaderEpoch: -1 });
          moved.push({ topic, partition, offset: target === null ? "beginning" : Number(target) });
        }
      }
      await this.consumer.commit({ offsets });
      log.warn("rewound partitions; what follows is delivered again", { partitions: moved.length });
      return moved;
    } finally {
      this.held = null;
      release();
    }
  }

  /** Whether the group refused this member and it has held no partition since: a process started
   * again after a crash, waiting for the broker to let its static id go. */
  refusedAndJoining(): boolean {
    if (this.refusedSince === null || this.everAssigned) return false;
    this.everAssigned = (this.consumer.assignments ?? []).some((a) => a.partitions.length > 0);
    return !this.everAssigned;
  }

  /** Commit what was acknowledged since the last commit (after the commit under way). */
  commitAcknowledged(): Promise<void> {
    this.committing = this.committing.then(async () => {
      if (this.acknowledged.size === 0) return;
      const offsets = [...this.acknowledged.values()];
      this.acknowledged.clear();
      try {
        await this.consumer.commit({ offsets });
      } catch (error) {
        log.warn("the group refused the acknowledgements (a partition moved); the new owner has them again", {
          partitions: offsets.map((o) => `${o.topic}/${o.partition}`),
          error: (error as Error).message,
        });
      }
    });
    return this.committing;
  }

  async run(topics: readonly string[]): Promise<void> {
    const ticking = setInterval(() => void this.commitAcknowledged(), ACK_COMMIT_INTERVAL_MS);
    try {
      await this.consume(topics);
    } finally {
      clearInterval(ticking);
      await this.commitAcknowledged();
    }
  }

  private async consume(topics: readonly string[]): Promise<void> {
    while (!this.stopping) {
      if (this.held) await this.held;
      this.opening = true;
      let stream: Stream | null;
      try {
        stream = await this.open(topics);
      } finally {
        this.opening = false;
      }
      if (stream === null) return;
      this.stream = stream;
      let leave = () => undefined as void;
      this.left = new Promise<void>((resolve) => {
        leave = resolve;
      });
      try {
        for await (const message of stream) {
          await this.handle(message as Record_);
          if (this.stopping || this.held) break;
        }
      } finally {
        this.stream = null;
        await stream.close().catch(() => undefined);
        await this.commitAcknowledged();
        leave();
      }
    }
  }

  /** The stream of the group's messages from its committed offsets (the earliest where none is).
   * A topic that does not exist yet is waited for, as librdkafka and the Java client do; a member
   * the group refuses (under the consumer protocol, a static instance id the broker still holds for
   * a process that was killed) joins again each second, for up to `refusedJoinWaitMs`. */
  private async open(topics: readonly string[]): Promise<Stream | null> {
    const started = Date.now();
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await this.consumer.consume({ topics: [...topics], autocommit: false, mode: "committed", fallbackMode: "earliest" });
      } catch (error) {
        if (this.stopping) return null;
        const errors = protocolErrors(error);
        if (errors.includes("UNKNOWN_TOPIC_OR_PARTITION")) {
          if (attempt === 1) log.warn("a topic to consume does not exist yet; waiting for it", { topics });
          await sleep(Math.min(5000, 250 * attempt));
        } else if (errors.includes("UNRELEASED_INSTANCE_ID") && Date.now() - started < this.refusedJoinWaitMs) {
          this.refusedSince ??= Date.now();
          log.warn("the group refused this member its instance id; joining again in 1 s", { errors });
          await sleep(1000);
        } else {
          throw error;
        }
      }
    }
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await this.stream?.close().catch(() => undefined);
    await this.left;
    await this.commitAcknowledged();
    await this.consumer.close(true);
  }

  private async handle(message: Record_): Promise<void> {
    const event = peek(message.value ?? null);
    const inHand = {
      consumer: this.processor.config.consumerName,
      keys: event?.key ? [event.key] : [],
      message_ids: event?.messageId ? [event.messageId] : [],
    };
    await this.faults.within(inHand, () => this.acknowledgeAfter(message));
  }

  private async acknowledgeAfter(message: Record_): Promise<void> {
    let event: Envelope | null = null;
    for (let attempt = 1; ; attempt += 1) {
      try {
        event = decodeRecord(message.value ?? null, message.key ?? null, recordHeaders(message.headers));
        await this.processor.process(event);
        break;
      } catch (error) {
        if (error instanceof RetryLater) {
          log.warn("database unavailable; the message waits", { consumer: this.processor.config.consumerName, error: error.message });
          await this.backOff(attempt);
          continue;
        }
        const failure =
          error instanceof TerminalFailure
            ? error
            : error instanceof PoisonMessage
              ? new TerminalFailure(error.reason, error)
              : new TerminalFailure("handler_failed", error);
        const messageId = event?.messageId ?? (error instanceof PoisonMessage ? error.messageId : null);
        await this.deadLetter(message, failure, messageId, event);
        break;
      }
    }
    await this.faults.hit("after_commit_before_ack");
    const { topic, partition } = message;
    this.acknowledged.set(`${topic}/${partition}`, { topic, partition, offset: message.offset + 1n, leaderEpoch: -1 });
  }

  /** Publish the dead letter until the broker confirms it; only then may the original be acknowledged. */
  private async deadLetter(
    message: Record_,
    failure: TerminalFailure,
    messageId: string | null,
    event: Envelope | null,
  ): Promise<void> {
    for (let attempt = 1; ; attempt += 1) {
      try {
        await this.deadLetters.publish(
          { topic: message.topic, partition: message.partition, offset: message.offset, key: message.key ?? null, value: message.value ?? null },
          { reason: failure.reason, errorClass: failure.errorClass, errorText: failure.errorText },
          messageId,
        );
        break;
      } catch (error) {
        log.warn("dead letter not confirmed; trying again", { error: (error as Error).message });
        await this.backOff(attempt);
      }
    }
    this.processor.record(event?.type ?? "(undecodable)", "terminal_failure", event, {
      reason: failure.reason,
      error_class: failure.errorClass,
      topic: message.topic,
      partition: message.partition,
      offset: message.offset.toString(),
    });
  }

  private async backOff(attempt: number): Promise<void> {
    if (this.stopping) throw new Error("stopping: the message is left unacknowledged");
    await sleep(Math.random() * Math.min(this.retryCapMs, 100 * 2 ** attempt));
  }
}
