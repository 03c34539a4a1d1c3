/**
 * The dead-letter topic: the original bytes and key, with `eo-` headers saying why, from where
 * and when. A dead letter counts once the broker confirmed it (acks=all); until then the
 * original message is not acknowledged.
 */

import { type Producer, ProduceAcks } from "@platformatic/kafka";

import { DEAD_LETTERS } from "./metrics.js";

export const HEADER_PREFIX = "eo-";

export interface Failure {
  reason: string;
  errorClass: string;
  errorText: string;
}

/** The record a dead letter is made of: where it was, and its bytes. */
export interface Original {
  topic: string;
  partition: number;
  offset: bigint;
  key: Buffer | null;
  value: Buffer | null;
}

/** How long a send may go without an answer before it counts as failed. */
export const SEND_TIMEOUT_MS = 30_000;

/** `promise`, or a rejection once `ms` passed without it settling. */
export async function withinTime<T>(ms: number, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer from Kafka within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

export type KafkaProducer = Producer<Buffer, Buffer, Buffer, Buffer>;

export class DeadLetterPublisher {
  constructor(
    private readonly producer: KafkaProducer,
    readonly consumerName: string,
    readonly topic: string,
  ) {}

  /** Publish the dead letter and resolve once the broker confirmed it; rejects otherwise, and
   * when no answer came within SEND_TIMEOUT_MS (the caller tries again: the idempotent producer
   * keeps a send that did reach the broker from being written twice by its own retries only, so a
   * dead letter may then be on the topic twice, under the same message id). */
  async publish(
    original: Original,
    failure: Failure,
    messageId: string | null,
  ): Promise<void> {
    const headers: Record<string, string> = {
      reason: failure.reason,
      "error-class": failure.errorClass,
      error: failure.errorText.slice(0, 2000),
      consumer: this.consumerName,
      "original-topic": original.topic,
      "original-partition": String(original.partition),
      "original-offset": original.offset.toString(),
      "message-id": messageId ?? "",
      "dead-lettered-at": new Date().toISOString(),
    };
    await withinTime(SEND_TIMEOUT_MS, this.producer.send({
      acks: ProduceAcks.ALL,
      messages: [
        {
          topic: this.topic,
          ...(original.key === null ? {} : { key: original.key }),
          ...(original.value === null ? {} : { value: original.value }),
          headers: new Map(
            Object.entries(headers).map(([name, value]) => [Buffer.from(HEADER_PREFIX + name), Buffer.from(value)]),
          ),
        },
      ],
    }));
    DEAD_LETTERS.labels(this.consumerName, failure.reason).inc();
  }
}
