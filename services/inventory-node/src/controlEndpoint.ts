/**
 * The control endpoint, as every process of the platform serves it (docs/consumer-process-contract.md):
 *
 *   GET    /metrics            Prometheus exposition
 *   GET    /faults             {"points", "actions", "armed", "fired", "consumer"}
 *   POST   /faults             {"point", "action", "times", "probability", "stall_seconds"}
 *   DELETE /faults[?point=x]   disarm one point, or all (stalls in progress end)
 *   GET    /strategy           {"consumer", "strategy": "correct", "strategies": ["correct"]}
 *   POST   /strategy           409: this implementation runs the correct path only
 *   POST   /rewind             {"to": "beginning"} or {"to": "2026-12-02T12:00:00Z"}: the group's
 *                              partitions go back there; {"consumer", "partitions": [...]}
 *   GET    /hold, /horizon     what the panel shows: nothing held, the configured dedup horizon
 *   POST   /hold, /horizon     409: those lab controls exist in the Python runtime only
 *
 * Who may call it: a Host that is a loopback name, an IP literal or a name in ALLOWED_HOSTS; no
 * browser request from another origin; a POST must be application/json (a cross-site form
 * cannot send that without a preflight, never granted). Every refusal is a 4xx naming the field.
 */

import { type IncomingMessage, type ServerResponse, createServer } from "node:http";
import { isIP } from "node:net";

import { ACTIONS, type FaultAction, type FaultPoints, RUNTIME_POINTS } from "./faults.js";
import { log } from "./log.js";
import { register } from "./metrics.js";

const MAX_BODY = 4096;
const MAX_SHOWN = 80;
const LOOPBACK_NAMES = new Set(["localhost", "127.0.0.1", "::1"]);

class Refusal extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** A value as an error may show it: printable, and at most MAX_SHOWN characters. */
export function cut(value: unknown): string {
  const text = (typeof value === "string" ? value : JSON.stringify(value) ?? String(value)).replace(
    /[\u0000-\u001f\u007f-\u009f\ud800-\udfff]/g,
    (character) => `\\u${character.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
  return text.length <= MAX_SHOWN ? text : `${text.slice(0, MAX_SHOWN)}… (${text.length} characters)`;
}

function hostName(header: string): string {
  const host = header.trim().toLowerCase();
  if (host.startsWith("[")) return host.includes("]") ? host.slice(1, host.indexOf("]")) : host;
  return host.split(":").length === 2 ? (host.split(":")[0] ?? "") : host;
}

export function hostAllowed(header: string | undefined, extra: ReadonlySet<string>): boolean {
  if (!header) return false;
  const name = hostName(header);
  return LOOPBACK_NAMES.has(name) || extra.has(name) || isIP(name) !== 0;
}

/** Another origin is another scheme, host or port: a page served over https is not this http endpoint. */
function originRefusal(origin: string | undefined, host: string | undefined, fetchSite: string | undefined): string | null {
  if (fetchSite === "cross-site") return "refused: this request comes from another site";
  if (origin === undefined) return null;
  let netloc = "";
  let scheme = "";
  try {
    const parsed = new URL(origin);
    netloc = parsed.host.toLowerCase();
    scheme = parsed.protocol;
  } catch {
    netloc = "";
  }
  if (origin === "null" || netloc !== (host ?? "").toLowerCase() || scheme !== "http:") {
    return `refused: this request comes from another origin (${cut(origin)})`;
  }
  return null;
}

function requestLineProblem(rawUrl: string): string | null {
  let decoded: string;
  try {
    decoded = decodeURIComponent(rawUrl.replaceAll("+", " "));
  } catch {
    return "the path or the query is not valid UTF-8";
  }
  return /[\u0000-\u001f\u007f]/.test(decoded) ? "the path or the query holds control characters" : null;
}

function textProblem(value: unknown, where: string): string | null {
  if (typeof value === "string") {
    if (/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(value)) {
      return `${where} holds a lone UTF-16 surrogate`;
    }
    return value.includes("\u0000") ? `${where} holds a NUL character` : null;
  }
  if (typeof value !== "object" || value === null) return null;
  for (const [key, item] of Object.entries(value)) {
    const problem = textProblem(key, `${where} (a key)`) ?? textProblem(item, `${where}.${cut(key)}`);
    if (problem) return problem;
  }
  return null;
}

async function readJson(request: IncomingMessage): Promise<Record<string, unknown>> {
  const kind = (request.headers["content-type"] ?? "").split(";")[0]?.trim().toLowerCase();
  if (kind !== "application/json") throw new Refusal(415, "the body must be application/json");
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY) throw new Refusal(413, `the body must be at most ${MAX_BODY} bytes`);
    chunks.push(chunk as Buffer);
  }
  const raw = Buffer.concat(chunks);
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(raw.length ? raw : Buffer.from("{}"));
  } catch {
    throw new Refusal(400, "the body is not valid UTF-8");
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (error) {
    throw new Refusal(400, `the body is not JSON: ${cut((error as Error).message)}`);
  }
  if (typeof body !== "object" || body === null || Array.isArray(body)) throw new Refusal(400, "body: must be an object");
  const problem = textProblem(body, "body");
  if (problem) throw new Refusal(400, problem);
  return body as Record<string, unknown>;
}

interface ArmRequest {
  point: string;
  action: FaultAction;
  times: number | null;
  probability: number;
  stallSeconds: number;
}

/** The POST /faults body, strictly: the fields and ranges of the Python runtime's ArmRequest. */
export function parseArmRequest(body: Record<string, unknown>, points: readonly string[]): ArmRequest {
  const known = new Set(["point", "action", "times", "probability", "stall_seconds"]);
  for (const name of Object.keys(body)) {
    if (!known.has(name)) throw new Refusal(400, `${cut(name)}: Extra inputs are not permitted`);
  }
  const { point, action, times = 1, probability = 1.0, stall_seconds: stall = 5.0 } = body;
  if (typeof point !== "string") throw new Refusal(400, "point: Input should be a valid string");
  if (!points.includes(point)) {
    throw new Refusal(400, `unknown fault point '${cut(point)}'; known: ${points.join(", ")}`);
  }
  if (typeof action !== "string" || !ACTIONS.includes(action as FaultAction)) {
    throw new Refusal(400, `action: Input should be ${ACTIONS.map((a) => `'${a}'`).join(", ")} (got ${cut(action)})`);
  }
  const count = times === null || times === "always" ? null : times;
  if (count !== null && !(typeof count === "number" && Number.isInteger(count) && count >= 1 && count <= 1_000_000)) {
    throw new Refusal(400, `times: a whole number from 1 to 1000000, "always" or null (got ${cut(times)})`);
  }
  if (typeof probability !== "number" || !(probability > 0 && probability <= 1)) {
    throw new Refusal(400, `probability: a number above 0 and at most 1 (got ${cut(probability)})`);
  }
  if (typeof stall !== "number" || !(stall >= 0 && stall <= 120)) {
    throw new Refusal(400, `stall_seconds: a number from 0 to 120 (got ${cut(stall)})`);
  }
  return { point, action: action as FaultAction, times: count, probability, stallSeconds: stall };
}

function send(response: ServerResponse, status: number, body: unknown, type = "application/json"): void {
  const payload = type === "application/json" ? JSON.stringify(body) : String(body);
  response.writeHead(status, { "Content-Type": type, "Content-Length": Buffer.byteLength(payload) });
  response.end(payload);
}

export interface ControlOptions {
  faults: FaultPoints;
  consumerName: string;
  allowedHosts: ReadonlySet<string>;
  points?: readonly string[];
  /** Move the group's partitions back to a time (null: the beginning); the partitions moved. */
  rewind?: (toTimestampMs: number | null) => Promise<unknown[]>;
  topics?: readonly string[];
  horizonSeconds?: number;
}

const LAB_ONLY = "this implementation has no hold or horizon lab controls (the Python runtime has them: INVENTORY_IMPL=python)";

const ISO_WITH_ZONE = /^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})$/;

/** The POST /rewind body: "beginning" (null), or an ISO 8601 time with a zone (epoch milliseconds). */
export function parseRewind(body: Record<string, unknown>): number | null {
  for (const name of Object.keys(body)) {
    if (name !== "to") throw new Refusal(400, `${cut(name)}: Extra inputs are not permitted`);
  }
  const to = body["to"];
  if (typeof to !== "string" || to.length > 64) throw new Refusal(400, "to: Input should be a valid string of at most 64 characters");
  if (to === "beginning") return null;
  const moment = Date.parse(to);
  if (!ISO_WITH_ZONE.test(to) || Number.isNaN(moment)) {
    throw new Refusal(400, `"to" must be "beginning" or an ISO 8601 time with a zone, not ${cut(to)}`);
  }
  return moment;
}

async function route(options: ControlOptions, request: IncomingMessage, response: ServerResponse): Promise<void> {
  const { faults, consumerName } = options;
  const points = options.points ?? RUNTIME_POINTS;
  const host = request.headers.host;
  if (!hostAllowed(host, options.allowedHosts)) {
    throw new Refusal(400, `the Host ${cut(host ?? "")} is not one this endpoint answers to`);
  }
  const refusal = originRefusal(
    request.headers.origin,
    host,
    request.headers["sec-fetch-site"] as string | undefined,
  );
  if (refusal) throw new Refusal(403, refusal);
  const problem = requestLineProblem(request.url ?? "/");
  if (problem) throw new Refusal(400, problem);
  const url = new URL(request.url ?? "/", "http://control");
  const method = request.method ?? "GET";
  if (!["GET", "POST", "DELETE", "HEAD"].includes(method)) throw new Refusal(405, "GET, POST or DELETE");

  if (url.pathname === "/metrics" && method === "GET") {
    send(response, 200, await register.metrics(), register.contentType);
  } else if (url.pathname === "/faults" && method === "GET") {
    const armed = Object.fromEntries(
      [...faults.armed()].map(([point, a]) => [point, { action: a.action, remaining: a.remaining, probability: a.probability }]),
    );
    send(response, 200, { points, actions: ACTIONS, armed, fired: faults.fired, consumer: consumerName });
  } else if (url.pathname === "/faults" && method === "POST") {
    const arm = parseArmRequest(await readJson(request), points);
    faults.arm(arm.point, {
      action: arm.action,
      remaining: arm.times,
      probability: arm.probability,
      stallSeconds: arm.stallSeconds,
    });
    send(response, 200, { armed: arm.point });
  } else if (url.pathname === "/faults" && method === "DELETE") {
    const point = url.searchParams.get("point");
    if (point !== null && !points.includes(point)) {
      throw new Refusal(400, `unknown fault point '${cut(point)}'; known: ${points.join(", ")}`);
    }
    faults.disarm(point ?? undefined);
    send(response, 200, { disarmed: point ?? "all" });
  } else if (url.pathname === "/strategy" && method === "GET") {
    send(response, 200, { consumer: consumerName, strategy: "correct", strategies: ["correct"] });
  } else if (url.pathname === "/strategy" && method === "POST") {
    await readJson(request);
    throw new Refusal(409, "this implementation runs the correct path only (it is given no teaching strategies)");
  } else if (url.pathname === "/rewind" && method === "POST" && options.rewind !== undefined) {
    const target = parseRewind(await readJson(request));
    send(response, 200, { consumer: consumerName, partitions: await options.rewind(target) });
  } else if (url.pathname === "/hold" && method === "GET") {
    send(response, 200, { consumer: consumerName, topics: options.topics ?? [], held: {} });
  } else if (url.pathname === "/horizon" && method === "GET") {
    const seconds = options.horizonSeconds ?? null;
    send(response, 200, { consumer: consumerName, seconds, configured_seconds: seconds });
  } else if ((url.pathname === "/hold" || url.pathname === "/horizon") && method === "POST") {
    await readJson(request);
    throw new Refusal(409, LAB_ONLY);
  } else if (["/metrics", "/faults", "/strategy", "/rewind", "/hold", "/horizon"].includes(url.pathname)) {
    throw new Refusal(405, "GET, POST or DELETE");
  } else {
    throw new Refusal(404, `no route ${cut(url.pathname)}`);
  }
}

/** Serve the control endpoint on host:port; resolves once it listens. */
export function serveControl(options: ControlOptions, host: string, port: number): Promise<() => Promise<void>> {
  const server = createServer((request, response) => {
    route(options, request, response).catch((error: unknown) => {
      if (error instanceof Refusal) {
        send(response, error.status, { error: error.message });
        return;
      }
      // The caller is told no more than that; the log keeps what failed, to be read.
      log.error("the control endpoint failed", {
        method: request.method,
        path: request.url,
        error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
        stack: error instanceof Error ? error.stack : undefined,
      });
      send(response, 500, { error: "the control endpoint failed" });
    });
  });
  server.headersTimeout = 10_000;
  server.requestTimeout = 15_000;
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve(() => new Promise((done) => server.close(() => done()))));
  });
}
