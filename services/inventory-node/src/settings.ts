/**
 * The process's settings, from the same environment variables as the Python runtime's
 * (effectively_once/consumer/wiring.py ConsumerSettings). Every value is checked at start; a bad one stops
 * the process with the variable named.
 */

import { hostname } from "node:os";

import type { SASLOptions } from "@platformatic/kafka";

import { ISOLATION_LEVELS, type IsolationLevel } from "./correctPath.js";

export interface Settings {
  databaseUrl: string;
  bootstrapServers: string[];
  consumerName: string | null;
  consumerGroup: string | null;
  topics: string[] | null;
  deadLetterTopic: string | null;
  isolationLevel: IsolationLevel;
  dedupHorizonDays: number;
  controlHost: string;
  controlPort: number | null;
  processName: string | null;
  faults: string;
  allowedHosts: Set<string>;
  members: number;
  telemetryTopic: string;
  /** The Kafka principal (KAFKA_USERNAME / KAFKA_PASSWORD), or null to connect without one. */
  sasl: KafkaSasl | null;
  /** Static group membership (EO_INSTANCE_ID, `{hostname}` replaced), or null. */
  instanceId: string | null;
  /** CONSUMER_GROUP_PROTOCOL: consumer (KIP-848, the default) or classic. */
  groupProtocol: "consumer" | "classic";
}

export type KafkaSasl = SASLOptions;

const MECHANISMS = { "SCRAM-SHA-512": "SCRAM-SHA-512", "SCRAM-SHA-256": "SCRAM-SHA-256", PLAIN: "PLAIN" } as const;

/** The principal the environment names, as the Python runtime's effectively_once/kafka_client.py reads it. */
function kafkaSasl(variables: Record<string, string | undefined>): KafkaSasl | null {
  const username = variables["KAFKA_USERNAME"] || "";
  const password = variables["KAFKA_PASSWORD"] || "";
  if (!username && !password) {
    return null;
  }
  if (!username || !password) {
    throw new SettingsError("KAFKA_USERNAME and KAFKA_PASSWORD: both are needed, or neither");
  }
  const mechanism = variables["KAFKA_SASL_MECHANISM"] || "SCRAM-SHA-512";
  if (!(mechanism in MECHANISMS)) {
    throw new SettingsError(`KAFKA_SASL_MECHANISM: one of ${Object.keys(MECHANISMS).join(", ")}`);
  }
  const protocol = variables["KAFKA_SECURITY_PROTOCOL"] || "SASL_PLAINTEXT";
  if (protocol !== "SASL_PLAINTEXT") {
    throw new SettingsError("KAFKA_SECURITY_PROTOCOL: this implementation speaks SASL_PLAINTEXT only");
  }
  return { mechanism: MECHANISMS[mechanism as keyof typeof MECHANISMS], username, password } as SASLOptions;
}

export class SettingsError extends Error {}

const NAME = /^[A-Za-z0-9._-]+$/;

function name(variables: NodeJS.ProcessEnv, variable: string, most: number): string | null {
  const value = variables[variable];
  if (value === undefined || value === "") return null;
  if (value.length > most || !NAME.test(value)) {
    throw new SettingsError(`${variable}: 1-${most} letters, digits, '.', '_' or '-'`);
  }
  return value;
}

function number(variables: NodeJS.ProcessEnv, variable: string, fallback: number, low: number, high: number): number {
  const raw = variables[variable];
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < low || value > high) {
    throw new SettingsError(`${variable}: a number from ${low} to ${high}, not '${raw.slice(0, 40)}'`);
  }
  return value;
}

function integer(variables: NodeJS.ProcessEnv, variable: string, fallback: number, low: number, high: number): number {
  const raw = variables[variable];
  if (raw === undefined || raw === "") return fallback;
  const value = /^\s*-?\d+\s*$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isSafeInteger(value) || value < low || value > high) {
    throw new SettingsError(`${variable}: a whole number from ${low} to ${high}, not '${raw.slice(0, 40)}'`);
  }
  return value;
}

export function loadSettings(variables: NodeJS.ProcessEnv = process.env): Settings {
  const databaseUrl = variables["DATABASE_URL"] ?? "";
  if (!databaseUrl) throw new SettingsError("DATABASE_URL: required (a postgresql:// URL)");
  const servers = (variables["KAFKA_BOOTSTRAP_SERVERS"] ?? "").split(",").map((s) => s.trim()).filter(Boolean);
  if (servers.length === 0) throw new SettingsError("KAFKA_BOOTSTRAP_SERVERS: required (host:port, comma-separated)");
  const level = variables["CONSUMER_ISOLATION_LEVEL"] || "READ COMMITTED";
  if (!ISOLATION_LEVELS.includes(level as IsolationLevel)) {
    throw new SettingsError(`CONSUMER_ISOLATION_LEVEL: one of ${ISOLATION_LEVELS.join(", ")}`);
  }
  const topics = variables["CONSUMER_TOPICS"];
  if (topics && !/^[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)*$/.test(topics)) {
    throw new SettingsError("CONSUMER_TOPICS: topic names, comma-separated");
  }
  const strategy = variables["CONSUMER_STRATEGY"] || "correct";
  if (strategy !== "correct") {
    throw new SettingsError(`CONSUMER_STRATEGY: this implementation runs the correct path only, not '${strategy.slice(0, 40)}'`);
  }
  const port = variables["CONTROL_PORT"];
  const protocol = variables["CONSUMER_GROUP_PROTOCOL"] || "consumer";
  if (protocol !== "consumer" && protocol !== "classic") {
    throw new SettingsError(`CONSUMER_GROUP_PROTOCOL: classic or consumer, not '${protocol.slice(0, 40)}'`);
  }
  const instance = variables["EO_INSTANCE_ID"] || null;
  return {
    databaseUrl,
    bootstrapServers: servers,
    consumerName: name(variables, "CONSUMER_NAME", 200),
    consumerGroup: name(variables, "CONSUMER_GROUP", 200),
    topics: topics ? topics.split(",") : null,
    deadLetterTopic: name(variables, "DEAD_LETTER_TOPIC", 249),
    isolationLevel: level as IsolationLevel,
    dedupHorizonDays: number(variables, "DEDUP_HORIZON_DAYS", 30, 0.000001, 3650),
    controlHost: variables["CONTROL_HOST"] || "127.0.0.1",
    controlPort: port ? integer(variables, "CONTROL_PORT", 0, 1, 65535) : null,
    processName: variables["EO_PROCESS_NAME"] || null,
    faults: variables["EO_FAULTS"] ?? "",
    members: integer(variables, "CONSUMER_MEMBERS", 1, 1, 16),
    telemetryTopic: variables["TELEMETRY_TOPIC"] ?? "platform.telemetry",
    sasl: kafkaSasl(variables),
    instanceId: instance === null ? null : instance.replaceAll("{hostname}", hostname()),
    groupProtocol: protocol,
    allowedHosts: new Set(
      (variables["ALLOWED_HOSTS"] ?? "").split(",").map((h) => h.trim().toLowerCase()).filter(Boolean),
    ),
  };
}
