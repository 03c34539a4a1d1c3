/**
 * `node dist/main.js`: the inventory-reservation-v1 consumer process. The one place that wires
 * settings, the pool, Kafka, the processor, the loop and the control endpoint.
 */

import { Kafka, logLevel } from "kafkajs";
import pg from "pg";

import { ConsumerLoop } from "./consumerLoop.js";
import { serveControl } from "./controlEndpoint.js";
import { DeadLetterPublisher } from "./deadLetters.js";
import { FaultPoints } from "./faults.js";
import { HANDLERS, IGNORED_TYPES, TOPICS } from "./inventory/handlers.js";
import { log, setLogFields } from "./log.js";
import { MessageProcessor } from "./processor.js";
import { SettingsError, loadSettings } from "./settings.js";

const DEFAULT_CONSUMER_NAME = "inventory-reservation-v1";

async function main(): Promise<void> {
  const settings = loadSettings();
  const consumerName = settings.consumerName ?? DEFAULT_CONSUMER_NAME;
  const processName = settings.processName ?? consumerName;
  setLogFields({ consumer: consumerName, process: processName, implementation: "node" });

  const faults = new FaultPoints();
  faults.armFromSpec(settings.faults);

  // One checked-out client per transaction (processor.ts); the pool only keeps it warm.
  const pool = new pg.Pool({
    connectionString: settings.databaseUrl,
    max: 1,
    connectionTimeoutMillis: 5000,
    application_name: processName.slice(0, 63),
  });
  pool.on("error", (error) => log.warn("an idle database connection failed", { error: error.message }));

  const kafka = new Kafka({
    clientId: processName,
    brokers: settings.bootstrapServers,
    logLevel: logLevel.WARN,
    logCreator: () => (entry) => log.warn(`kafkajs: ${entry.log.message}`, { namespace: entry.namespace }),
  });
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false });
  const consumer = kafka.consumer({
    groupId: settings.consumerGroup ?? consumerName,
    sessionTimeout: 30_000,
    heartbeatInterval: 1_000,
    allowAutoTopicCreation: false,
  });

  const processor = new MessageProcessor(
    {
      consumerName,
      isolationLevel: settings.isolationLevel,
      ignoredTypes: IGNORED_TYPES,
      dedupHorizonMs: settings.dedupHorizonDays * 86_400_000,
      maxTransactionAttempts: 8,
      maxHandlerAttempts: 3,
      backoffBaseMs: 5,
      backoffCapMs: 1000,
    },
    pool,
    HANDLERS,
    faults,
  );
  const deadLetters = new DeadLetterPublisher(producer, consumerName, settings.deadLetterTopic ?? `dlq.${consumerName}`);
  const loop = new ConsumerLoop(consumer, processor, deadLetters, faults);

  if (settings.controlPort !== null) {
    await serveControl({ faults, consumerName, allowedHosts: settings.allowedHosts }, settings.controlHost, settings.controlPort);
  }
  await producer.connect();
  await consumer.connect();
  const topics = settings.topics ?? [...TOPICS];
  log.info("consuming", { topics, group: settings.consumerGroup ?? consumerName });

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info("stopping", { signal });
    await loop.stop().catch(() => undefined);
    await producer.disconnect().catch(() => undefined);
    await pool.end().catch(() => undefined);
    process.exit(0);
  };
  process.on("SIGTERM", () => void stop("SIGTERM"));
  process.on("SIGINT", () => void stop("SIGINT"));
  consumer.on(consumer.events.CRASH, (event) => {
    if (!event.payload.restart) {
      log.error("the Kafka consumer stopped for good", { error: String(event.payload.error) });
      process.exit(1);
    }
  });
  await loop.run(topics);
}

main().catch((error: unknown) => {
  if (error instanceof SettingsError) {
    process.stderr.write(`inventory-node: ${error.message}\n`);
    process.exit(2);
  }
  log.error("start-up failed", { error: String((error as Error)?.stack ?? error) });
  process.exit(1);
});
