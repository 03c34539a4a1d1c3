/**
 * `node dist/main.js`: the inventory-reservation-v1 consumer process. The one place that wires
 * settings, the pools, Kafka, the processors, the loops and the control endpoint.
 */

import { Consumer, ProduceAcks, Producer } from "@platformatic/kafka";
import pg from "pg";

import { ConsumerLoop, type KafkaConsumer } from "./consumerLoop.js";
import { serveControl } from "./controlEndpoint.js";
import { DeadLetterPublisher, type KafkaProducer } from "./deadLetters.js";
import { FaultPoints } from "./faults.js";
import { HANDLERS, IGNORED_TYPES, TOPICS } from "./inventory/handlers.js";
import { log, setLogFields } from "./log.js";
import { MessageProcessor } from "./processor.js";
import { SettingsError, loadSettings } from "./settings.js";
import { KafkaTelemetry, NO_TELEMETRY, type Telemetry } from "./telemetry.js";

const DEFAULT_CONSUMER_NAME = "inventory-reservation-v1";

/** The group settings of one member. Under the consumer protocol (KIP-848) the broker assigns, with
 * its range assignor as the other implementations ask for, and holds the session; under the
 * classic one the client offers its round-robin assignor under the name the Java client and
 * librdkafka give the same strategy ("roundrobin"), so members of every implementation can share
 * one group, as they do for a moment when `make up INVENTORY_IMPL=…` replaces one with another. */
function groupOptions(protocol: "consumer" | "classic", instanceId: string | null) {
  const instance = instanceId === null ? {} : { groupInstanceId: instanceId };
  return protocol === "consumer"
    ? { groupProtocol: "consumer" as const, groupRemoteAssignor: "range", ...instance }
    : { groupProtocol: "classic" as const, sessionTimeout: 6_000, heartbeatInterval: 1_000, ...instance };
}

async function main(): Promise<void> {
  const settings = loadSettings();
  const consumerName = settings.consumerName ?? DEFAULT_CONSUMER_NAME;
  const processName = settings.processName ?? consumerName;
  const group = settings.consumerGroup ?? consumerName;
  setLogFields({ consumer: consumerName, process: processName, implementation: "node" });

  const faults = new FaultPoints();
  faults.armFromSpec(settings.faults);

  const connection = {
    bootstrapBrokers: settings.bootstrapServers,
    ...(settings.sasl ? { sasl: settings.sasl } : {}),
    autocreateTopics: false,
    timeout: 30_000,
  };
  const producer: KafkaProducer = new Producer({ ...connection, clientId: processName, idempotent: true, acks: ProduceAcks.ALL });
  const deadLetters = new DeadLetterPublisher(producer, consumerName, settings.deadLetterTopic ?? `dlq.${consumerName}`);
  // TELEMETRY_TOPIC empty: told to no one. Its own producer: acks=1, as telemetry may be lost.
  const telemetryProducer: KafkaProducer = new Producer({ ...connection, clientId: `${processName}-telemetry`, acks: ProduceAcks.LEADER });
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
    const instanceId = settings.instanceId !== null && settings.members > 1 ? `${settings.instanceId}-m${member}` : settings.instanceId;
    const consumer: KafkaConsumer = new Consumer({
      ...connection,
      clientId: `${processName}-${member}`,
      groupId: group,
      ...groupOptions(settings.groupProtocol, instanceId),
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
    loops.push(new ConsumerLoop(consumer, processor, deadLetters, faults));
  }

  const rewind = async (toTimestampMs: number | null) => {
    const moved = (await Promise.all(loops.map((loop) => loop.rewind(toTimestampMs)))).flat();
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
  telemetry.emit("started", { consumer: consumerName, strategy: "correct", members: settings.members });

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info("stopping", { signal });
    await Promise.all(loops.map((loop) => loop.stop().catch(() => undefined)));
    await telemetry.flush(2000);
    await producer.close().catch(() => undefined);
    await telemetryProducer.close().catch(() => undefined);
    await Promise.all(pools.map((pool) => pool.end().catch(() => undefined)));
    process.exit(0);
  };
  process.on("SIGTERM", () => void stop("SIGTERM"));
  process.on("SIGINT", () => void stop("SIGINT"));

  const topics = settings.topics ?? [...TOPICS];
  log.info("consuming", { topics, group, members: settings.members, protocol: settings.groupProtocol });
  // A loop that fails for good (its client refused, a broker error it cannot get past) ends the
  // process, for its supervisor to start a fresh one; stopping ends the loops without that.
  await Promise.all(
    loops.map((loop) =>
      loop.run(topics).catch((error: unknown) => {
        if (stopping) return;
        log.error("the Kafka consumer stopped for good", { error: String((error as Error)?.stack ?? error) });
        process.exit(1);
      }),
    ),
  );
}

main().catch((error: unknown) => {
  if (error instanceof SettingsError) {
    process.stderr.write(`inventory-node: ${error.message}\n`);
    process.exit(2);
  }
  log.error("start-up failed", { error: String((error as Error)?.stack ?? error) });
  process.exit(1);
});
