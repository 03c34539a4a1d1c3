/**
 * The dead-letter topic: the original bytes and key, with `eo-` headers saying why, from where
 * and when. A dead letter counts once the broker confirmed it (acks=all); until then the
 * original message is not acknowledged.
 */

import type { KafkaMessage, Producer } from "kafkajs";

import { DEAD_LETTERS } from "./metrics.js";

export const HEADER_PREFIX = "eo-";

export interface Failure {
  reason: string;
  errorClass: string;
  errorText: string;
}

export class DeadLetterPublisher {
  constructor(
    private readonly producer: Producer,
    readonly consumerName: string,
    readonly topic: string,
  ) {}

  /** Publish the dead letter and resolve once the broker confirmed it; rejects otherwise. */
  async publish(
    original: { topic: string; partition: number; message: KafkaMessage },
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
      "original-offset": String(original.message.offset),
      "message-id": messageId ?? "",
      "dead-lettered-at": new Date().toISOString(),
    };
    await this.producer.send({
      topic: this.topic,
      acks: -1,
      timeout: 30_000,
      messages: [
        {
          key: original.message.key,
          value: original.message.value,
          headers: Object.fromEntries(Object.entries(headers).map(([name, value]) => [HEADER_PREFIX + name, value])),
        },
      ],
    });
    DEAD_LETTERS.labels(this.consumerName, failure.reason).inc();
  }
}
