/**
 * `node dist/main.js`: the inventory-reservation-v1 consumer process. The one place that wires
 * settings, the pools, Kafka, the processors, the loops and the control endpoint.
 */

import { Kafka, PartitionAssigners, type PartitionAssigner, logLevel } from "kafkajs";
import pg from "pg";

import { ConsumerLoop } from "./consumerLoop.js";
import { serveControl } from "./controlEndpoint.js";
import { DeadLetterPublisher } from "./deadLetters.js";
import { FaultPoints } from "./faults.js";
import { HANDLERS, IGNORED_TYPES, TOPICS } from "./inventory/handlers.js";
import { log, setLogFields } from "./log.js";
import { MessageProcessor } from "./processor.js";
import { SettingsError, loadSettings } from "./settings.js";
import { KafkaTelemetry, NO_TELEMETRY, type Telemetry } from "./telemetry.js";

const DEFAULT_CONSUMER_NAME = "inventory-reservation-v1";

/** kafkajs's round-robin assignor under the protocol name the Java client and librdkafka give the
 * same strategy ("roundrobin"): members of every implementation can then share one group, as they
 * do for a moment when `make up INVENTORY_IMPL=…` replaces one with another. */
const roundRobin: PartitionAssigner = (config) => ({ ...PartitionAssigners.roundRobin(config), name: "roundrobin" });

async function main(): Promise<void> {
  const settings = loadSettings();
  const consumerName = settings.consumerName ?? DEFAULT_CONSUMER_NAME;
  const processName = settings.processName ?? consumerName;
  const group = settings.consumerGroup ?? consumerName;
  setLogFields({ consumer: consumerName, process: processName, implementation: "node" });

  const faults = new FaultPoints();
  faults.armFromSpec(settings.faults);

  const kafka = new Kafka({
    clientId: processName,
    brokers: settings.bootstrapServers,
    ...(settings.sasl ? { sasl: settings.sasl, ssl: false } : {}),
    logLevel: logLevel.WARN,
    logCreator: () => (entry) => log.warn(`kafkajs: ${entry.log.message}`, { namespace: entry.namespace }),
  });
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false });
  const deadLetters = new DeadLetterPublisher(producer, consumerName, settings.deadLetterTopic ?? `dlq.${consumerName}`);
  // TELEMETRY_TOPIC empty: told to no one. Its own producer: acks=1, as telemetry may be lost.
  const telemetryProducer = kafka.producer({ allowAutoTopicCreation: false });
  const telemetry: Telemetry = settings.telemetryTopic
    ? new KafkaTelemetry(telemetryProducer, settings.telemetryTopic, processName)
    : NO_TELEMETRY;
  faults.onFire = async (point, action, context) => {
    telemetry.emit("fault", { point, action, ...context });
    if (action === "crash") await telemetry.flush(2000);
  };

  // CONSUMER_MEMBERS members of the group, each with its own connection: one checked-out client
  // per transaction (processor.ts); the pool only keeps it warm.
  const pools: pg.Pool[] = [];
  const loops: ConsumerLoop[] = [];
  for (let member = 0; member < settings.members; member += 1) {
    const pool = new pg.Pool({
      connectionString: settings.databaseUrl,
      max: 1,
      connectionTimeoutMillis: 5000,
      application_name: processName.slice(0, 63),
    });
    pool.on("error", (error) => log.warn("an idle database connection failed", { error: error.message }));
    pools.push(pool);
    const consumer = kafka.consumer({
      groupId: group,
      sessionTimeout: 6_000, // a crashed member's partitions move on within seconds (the loop heartbeats)
      heartbeatInterval: 1_000,
      allowAutoTopicCreation: false,
      partitionAssigners: [roundRobin],
    });
    consumer.on(consumer.events.CRASH, (event) => {
      if (!event.payload.restart) {
        log.error("the Kafka consumer stopped for good", { error: String(event.payload.error) });
        process.exit(1);
      }
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
      telemetry,
    );
    loops.push(new ConsumerLoop(consumer, processor, deadLetters, faults, group));
  }

  const admin = kafka.admin();
  const rewind = async (toTimestampMs: number | null) => {
    await admin.connect();
    const moved = (await Promise.all(loops.map((loop) => loop.rewind(admin, toTimestampMs)))).flat();
    telemetry.emit("rewind", { consumer: consumerName, partitions: moved, to_timestamp_ms: toTimestampMs });
    return moved;
  };
  if (settings.controlPort !== null) {
    await serveControl(
      {
        faults,
        consumerName,
        allowedHosts: settings.allowedHosts,
        rewind,
        topics: settings.topics ?? [...TOPICS],
        horizonSeconds: settings.dedupHorizonDays * 86_400,
      },
      settings.controlHost,
      settings.controlPort,
    );
  }
  await producer.connect();
  if (settings.telemetryTopic) await telemetryProducer.connect();
  telemetry.emit("started", { consumer: consumerName, strategy: "correct", members: settings.members });

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info("stopping", { signal });
    await Promise.all(loops.map((loop) => loop.stop().catch(() => undefined)));
    await telemetry.flush(2000);
    await producer.disconnect().catch(() => undefined);
    await telemetryProducer.disconnect().catch(() => undefined);
    await admin.disconnect().catch(() => undefined);
    await Promise.all(pools.map((pool) => pool.end().catch(() => undefined)));
    process.exit(0);
  };
  process.on("SIGTERM", () => void stop("SIGTERM"));
  process.on("SIGINT", () => void stop("SIGINT"));

  const topics = settings.topics ?? [...TOPICS];
  log.info("consuming", { topics, group, members: settings.members });
  await Promise.all(loops.map((loop) => loop.run(topics)));
}

main().catch((error: unknown) => {
  if (error instanceof SettingsError) {
    process.stderr.write(`inventory-node: ${error.message}\n`);
    process.exit(2);
  }
  log.error("start-up failed", { error: String((error as Error)?.stack ?? error) });
  process.exit(1);
});
