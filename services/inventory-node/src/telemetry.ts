/**
 * Delivery telemetry, as the Python runtime tells it (effectively_once/telemetry.py): what this
 * process did with each message, on the `platform.telemetry` topic, keyed by order. The chaos
 * panel reads it to draw each order's timeline. Records carry ids, never payloads.
 *
 * Fire-and-forget: telemetry never slows a transaction or changes an outcome. The one exception is
 * a crash, which waits (briefly) for what was told before it, since the process is about to lose it.
 */

import { hostname } from "node:os";

import { ProduceAcks } from "@platformatic/kafka";

import type { KafkaProducer } from "./deadLetters.js";
import { log } from "./log.js";

export interface Telemetry {
  emit(kind: string, fields?: Record<string, unknown>): void;
  flush(timeoutMs: number): Promise<void>;
}

export const NO_TELEMETRY: Telemetry = { emit: () => undefined, flush: async () => undefined };

export class KafkaTelemetry implements Telemetry {
  private readonly own: Record<string, unknown>;
  private pending = new Set<Promise<unknown>>();

  constructor(
    private readonly producer: KafkaProducer,
    private readonly topic: string,
    process: string,
  ) {
    this.own = { process, instance: `${process}@${hostname()}`, pid: globalThis.process.pid, run_id: globalThis.process.env["EO_RUN_ID"] ?? "" };
  }

  emit(kind: string, fields: Record<string, unknown> = {}): void {
    const told = Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== null && value !== undefined));
    const record = { ...this.own, kind, at: Date.now() / 1000, ...told };
    const key = typeof told["key"] === "string" ? told["key"] : null;
    const sent = this.producer
      .send({
        acks: ProduceAcks.LEADER,
        messages: [{ topic: this.topic, ...(key === null ? {} : { key: Buffer.from(key) }), value: Buffer.from(JSON.stringify(record)) }],
      })
      .catch((error: unknown) => log.warn("telemetry dropped", { error: String(error) }))
      .finally(() => this.pending.delete(sent));
    this.pending.add(sent);
  }

  async flush(timeoutMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    });
    await Promise.race([Promise.allSettled([...this.pending]), late]);
    clearTimeout(timer);
  }
}
