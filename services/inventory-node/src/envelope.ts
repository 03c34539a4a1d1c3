/**
 * The event envelope, decoded and validated on the way in, with the same poison reasons as the
 * Python runtime (effectively_once/envelope.py): a message no retry can fix is a PoisonMessage,
 * dead-lettered at once with its reason.
 *
 * A message from Kafka keeps its body (`body`) and its record's key and headers (`delivery`, as
 * JSON): the marker stores a digest of them (the database's message_content_digest, migration
 * 0008), so that a copy with the same id and other content is counted apart. Its `eo-message-id`
 * header, when present, must name the envelope's id.
 */

import { randomBytes } from "node:crypto";

export const MAX_MESSAGE_ID_LENGTH = 255;
export const MAX_BODY_BYTES = 512 * 1024;
export const MESSAGE_ID_HEADER = "eo-message-id";

export interface Envelope {
  readonly messageId: string;
  readonly type: string;
  readonly key: string;
  readonly payload: Readonly<Record<string, unknown>>;
  readonly occurredAt: string;
  readonly version: number;
  readonly traceId: string | null;
  /** The record's value as received (null for an event made here). */
  readonly body: string | null;
  /** The record's key and headers as JSON, `{"key": hex, "headers": {name: [hex, ...], ...}}`. */
  readonly delivery: string | null;
}

/** A record's headers by name: a value, or several under one name (consumerLoop.ts's recordHeaders). */
export type RecordHeaders = Record<string, Buffer | string | null | Array<Buffer | string | null> | undefined>;

export class PoisonMessage extends Error {
  constructor(
    readonly reason: string,
    readonly detail: string,
    readonly messageId: string | null = null,
  ) {
    super(`${reason}: ${detail}`);
  }
}

const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}]|[^\S ]/u;
/** What Python's str.isprintable() refuses: control, format, surrogate, private-use and
 * unassigned characters, and every separator but the plain space. */

function text(body: Record<string, unknown>, name: string, messageId: string | null, limit = 255): string {
  const value = body[name];
  if (typeof value !== "string" || value === "") {
    throw new PoisonMessage(`invalid_${name}`, `${name} must be a non-empty string`, messageId);
  }
  if ([...value].length > limit) {
    throw new PoisonMessage(`invalid_${name}`, `${name} is longer than ${limit} characters`, messageId);
  }
  if (UNPRINTABLE.test(value)) {
    throw new PoisonMessage(`invalid_${name}`, `${name} contains unprintable characters`, messageId);
  }
  return value;
}

const ISO_WITH_ZONE = /^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:?\d{2})$/;

/** Parse and validate one record: its body, and its `eo-message-id` header against the envelope's id. */
export function decodeRecord(raw: Buffer | null, recordKey: Buffer | null, headers: RecordHeaders | undefined): Envelope {
  const event = decode(raw);
  const values: Record<string, Array<string | null>> = {};
  for (const [name, given] of Object.entries(headers ?? {})) {
    for (const value of Array.isArray(given) ? given : [given]) {
      const bytes = value === undefined || value === null ? null : Buffer.from(value);
      if (name === MESSAGE_ID_HEADER && (bytes === null || !bytes.equals(Buffer.from(event.messageId)))) {
        throw new PoisonMessage(
          "message_id_mismatch",
          `its ${MESSAGE_ID_HEADER} header does not name the envelope's message_id`,
          event.messageId,
        );
      }
      (values[name] ??= []).push(bytes === null ? null : bytes.toString("hex"));
    }
  }
  const delivery = JSON.stringify({ key: recordKey === null ? null : recordKey.toString("hex"), headers: values });
  return { ...event, delivery };
}

const UNSTORABLE = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Whether PostgreSQL's jsonb can hold every string in `value`: no NUL and no lone surrogate. */
function storable(value: unknown): boolean {
  if (typeof value === "string") return !UNSTORABLE.test(value);
  if (Array.isArray(value)) return value.every(storable);
  if (typeof value === "object" && value !== null) {
    return Object.entries(value).every(([key, item]) => storable(key) && storable(item));
  }
  return true;
}

/** Parse and validate one message body, or throw PoisonMessage with the reason. */
export function decode(raw: Buffer | null): Envelope {
  if (raw === null || raw.length === 0) throw new PoisonMessage("empty_body", "the message has no body");
  if (raw.length > MAX_BODY_BYTES) {
    throw new PoisonMessage("oversized", `${raw.length} bytes is more than ${MAX_BODY_BYTES}`);
  }
  let body: unknown;
  let received: string;
  try {
    received = new TextDecoder("utf-8", { fatal: true }).decode(raw);
    body = JSON.parse(received);
  } catch (error) {
    throw new PoisonMessage("undecodable", `not UTF-8 JSON (${(error as Error).name})`);
  }
  if (received.includes("\\u") && !storable(body)) {
    throw new PoisonMessage("undecodable", "a string holds a NUL character or a lone surrogate");
  }
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new PoisonMessage("undecodable", "the JSON body is not an object");
  }
  const fields = body as Record<string, unknown>;
  if (!fields["message_id"]) throw new PoisonMessage("missing_message_id", "message_id is missing or empty");
  const messageId = text(fields, "message_id", null, MAX_MESSAGE_ID_LENGTH);
  const type = text(fields, "type", messageId, 100);
  const key = text(fields, "key", messageId);
  const version = fields["version"] ?? 1;
  if (typeof version !== "number" || !Number.isInteger(version) || version < 1) {
    throw new PoisonMessage("invalid_version", "version must be a positive integer", messageId);
  }
  const occurredAt = String(fields["occurred_at"]);
  if (!ISO_WITH_ZONE.test(occurredAt) || Number.isNaN(Date.parse(occurredAt))) {
    throw new PoisonMessage("invalid_occurred_at", "occurred_at must be an ISO-8601 time with a zone", messageId);
  }
  const traceId = fields["trace_id"] ?? null;
  if (traceId !== null && typeof traceId !== "string") {
    throw new PoisonMessage("invalid_trace_id", "trace_id must be a string", messageId);
  }
  const payload = fields["payload"] ?? {};
  if (typeof payload !== "object" || payload === null || Array.isArray(payload)) {
    throw new PoisonMessage("invalid_payload", "payload must be a JSON object", messageId);
  }
  return {
    messageId,
    type,
    key,
    payload: payload as Record<string, unknown>,
    occurredAt,
    version,
    traceId,
    body: received,
    delivery: null,
  };
}

/** A new event with a new, permanent message id, a UUIDv7 (for the outbox). */
export function newEnvelope(type: string, key: string, payload: Record<string, unknown>, traceId: string | null): Envelope {
  return {
    messageId: newMessageId(),
    type,
    key,
    payload,
    occurredAt: new Date().toISOString(),
    version: 1,
    traceId: traceId ?? crypto.randomUUID().replaceAll("-", ""),
    body: null,
    delivery: null,
  };
}

/** The body a marker's content digest is computed from: as received, or (an event made here) its JSON. */
export function bodyOf(event: Envelope): string {
  return (
    event.body ??
    JSON.stringify({
      message_id: event.messageId,
      type: event.type,
      version: event.version,
      key: event.key,
      occurred_at: event.occurredAt,
      trace_id: event.traceId,
      payload: event.payload,
    })
  );
}

/** A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, the version, 74 random bits and the variant. */
export function newMessageId(now: number = Date.now()): string {
  const bytes = randomBytes(16);
  bytes.writeUIntBE(now, 0, 6);
  bytes[6] = 0x70 | (bytes[6]! & 0x0f);
  bytes[8] = 0x80 | (bytes[8]! & 0x3f);
  const hex = bytes.toString("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

const TIMED_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** The time (Unix ms) a UUIDv7 message id carries, or null for an untimed id (as the database's message_id_time). */
export function idTime(messageId: string): number | null {
  if (!TIMED_ID.test(messageId)) return null;
  return parseInt(messageId.slice(0, 8) + messageId.slice(9, 13), 16);
}
