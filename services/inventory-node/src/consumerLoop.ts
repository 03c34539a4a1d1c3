/**
 * The Kafka loop: take a message, run it through the processor, and only then acknowledge it.
 *
 * Acknowledging is returning from `eachMessage`: only then does kafkajs resolve the message's
 * offset, and it commits resolved offsets (never fetched ones) every second, at the end of each
 * fetched batch, before a rebalance and on a clean stop. The handler returns after the transaction
 * committed (applied, duplicate) or after the broker confirmed the dead letter (terminal failure).
 * A crash before that, even right after COMMIT, redelivers the message and the marker makes it a
 * duplicate; so does a crash before resolved offsets were committed. A lost database session
 * acknowledges nothing: the same message is tried again until the database answers.
 */

import type { Admin, Consumer, EachMessagePayload } from "kafkajs";

import type { DeadLetterPublisher } from "./deadLetters.js";
import { type Envelope, PoisonMessage, decode, decodeRecord } from "./envelope.js";
import type { FaultPoints } from "./faults.js";
import { log } from "./log.js";
import { type MessageProcessor, RetryLater, TerminalFailure } from "./processor.js";
import { rewindTarget } from "./rewindTarget.js";

/** The event's ids for what a fault point tells, or null for a message that does not decode. */
function peek(value: Buffer | null): Envelope | null {
  try {
    return decode(value);
  } catch {
    return null;
  }
}

/** How often resolved offsets are committed while a batch is in progress. */
const ACK_COMMIT_INTERVAL_MS = 1000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface Moved {
  topic: string;
  partition: number;
  offset: string | number;
}

export class ConsumerLoop {
  private stopping = false;
  private assigned: Record<string, number[]> = {};

  constructor(
    private readonly consumer: Consumer,
    private readonly processor: MessageProcessor,
    private readonly deadLetters: DeadLetterPublisher,
    private readonly faults: FaultPoints,
    private readonly groupId: string,
    private readonly retryCapMs = 5000,
  ) {
    this.consumer.on(this.consumer.events.GROUP_JOIN, (event) => {
      this.assigned = event.payload.memberAssignment;
    });
  }

  /** Move this member's partitions back to a time (null: the beginning): what follows is delivered
   * again, and the markers make it duplicates. Never forward (rewindTarget): a partition the member
   * has not reached the time in, or with nothing at the time, stays at the group's committed offset. */
  async rewind(admin: Admin, toTimestampMs: number | null): Promise<Moved[]> {
    const moved: Moved[] = [];
    for (const [topic, partitions] of Object.entries(this.assigned)) {
      const ends = await admin.fetchTopicOffsets(topic);
      const found = toTimestampMs === null ? [] : await admin.fetchTopicOffsetsByTimestamp(topic, toTimestampMs);
      const [committed] = await admin.fetchOffsets({ groupId: this.groupId, topics: [topic] });
      for (const partition of partitions) {
        const atTime = toTimestampMs === null ? null : BigInt(found.find((o) => o.partition === partition)?.offset ?? "-1");
        const stands = committed?.partitions.find((o) => o.partition === partition)?.offset;
        const target = rewindTarget(atTime, stands === undefined ? null : BigInt(stands));
        const offset = target === null ? (ends.find((o) => o.partition === partition)?.low ?? "0") : target.toString();
        this.consumer.seek({ topic, partition, offset });
        moved.push({ topic, partition, offset: target === null ? "beginning" : Number(target) });
      }
    }
    log.warn("rewound partitions; what follows is delivered again", { partitions: moved.length });
    return moved;
  }

  async run(topics: readonly string[]): Promise<void> {
    await this.consumer.connect();
    // A topic that does not exist yet is waited for, as librdkafka and the Java client do, rather
    // than ending the process (which its supervisor would restart into the same error).
    for (let attempt = 1; ; attempt += 1) {
      try {
        await this.consumer.subscribe({ topics: [...topics], fromBeginning: true });
        break;
      } catch (error) {
        if ((error as { type?: string }).type !== "UNKNOWN_TOPIC_OR_PARTITION" || this.stopping) throw error;
        if (attempt === 1) log.warn("a topic to consume does not exist yet; waiting for it", { topics });
        await sleep(Math.min(5000, 250 * attempt));
      }
    }
    // autoCommit commits what eachMessage resolved by returning; ACK_COMMIT_INTERVAL_MS as the
    // Python runtime's librdkafka commits its stored offsets.
    await this.consumer.run({
      autoCommit: true,
      autoCommitInterval: ACK_COMMIT_INTERVAL_MS,
      eachMessage: (payload) => this.handle(payload),
    });
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await this.consumer.disconnect();
  }

  /** One message, heartbeating while it is in flight: kafkajs heartbeats only between messages,
   * and a transaction may wait on another's claim for longer than the session timeout. */
  private async handle(payload: EachMessagePayload): Promise<void> {
    const beating = setInterval(() => void payload.heartbeat().catch(() => undefined), 1000);
    const event = peek(payload.message.value);
    const inHand = {
      consumer: this.processor.config.consumerName,
      keys: event?.key ? [event.key] : [],
      message_ids: event?.messageId ? [event.messageId] : [],
    };
    try {
      await this.faults.within(inHand, () => this.acknowledgeAfter(payload));
    } finally {
      clearInterval(beating);
    }
  }

  private async acknowledgeAfter(payload: EachMessagePayload): Promise<void> {
    const { message, heartbeat } = payload;
    let event: Envelope | null = null;
    for (let attempt = 1; ; attempt += 1) {
      try {
        event = decodeRecord(message.value, message.key, message.headers);
        await this.processor.process(event);
        break;
      } catch (error) {
        if (error instanceof RetryLater) {
          log.warn("database unavailable; the message waits", { consumer: this.processor.config.consumerName, error: error.message });
          await this.backOff(attempt, heartbeat);
          continue;
        }
        const failure =
          error instanceof TerminalFailure
            ? error
            : error instanceof PoisonMessage
              ? new TerminalFailure(error.reason, error)
              : new TerminalFailure("handler_failed", error);
        const messageId = event?.messageId ?? (error instanceof PoisonMessage ? error.messageId : null);
        await this.deadLetter(payload, failure, messageId, event);
        break;
      }
    }
    await this.faults.hit("after_commit_before_ack");
    // Returning acknowledges: kafkajs resolves this offset now and commits it with the next batch.
  }

  /** Publish the dead letter until the broker confirms it; only then may the original be acknowledged. */
  private async deadLetter(
    payload: EachMessagePayload,
    failure: TerminalFailure,
    messageId: string | null,
    event: Envelope | null,
  ): Promise<void> {
    for (let attempt = 1; ; attempt += 1) {
      try {
        await this.deadLetters.publish(
          { topic: payload.topic, partition: payload.partition, message: payload.message },
          { reason: failure.reason, errorClass: failure.errorClass, errorText: failure.errorText },
          messageId,
        );
        break;
      } catch (error) {
        log.warn("dead letter not confirmed; trying again", { error: (error as Error).message });
        await this.backOff(attempt, payload.heartbeat);
      }
    }
    this.processor.record(event?.type ?? "(undecodable)", "terminal_failure", event, {
      reason: failure.reason,
      error_class: failure.errorClass,
      topic: payload.topic,
      partition: payload.partition,
      offset: payload.message.offset,
    });
  }

  private async backOff(attempt: number, heartbeat: () => Promise<void>): Promise<void> {
    if (this.stopping) throw new Error("stopping: the message is left unacknowledged");
    await sleep(Math.random() * Math.min(this.retryCapMs, 100 * 2 ** attempt));
    await heartbeat().catch(() => undefined);
  }
}
