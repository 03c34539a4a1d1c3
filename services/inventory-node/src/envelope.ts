/**
 * The event envelope, decoded and validated on the way in, with the same poison reasons as the
 * Python runtime (effectively_once/envelope.py): a message no retry can fix is a PoisonMessage,
 * dead-lettered at once with its reason.
 */

export const MAX_MESSAGE_ID_LENGTH = 255;
export const MAX_BODY_BYTES = 512 * 1024;

export interface Envelope {
  readonly messageId: string;
  readonly type: string;
  readonly key: string;
  readonly payload: Readonly<Record<string, unknown>>;
  readonly occurredAt: string;
  readonly version: number;
  readonly traceId: string | null;
}

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

/** Parse and validate one message body, or throw PoisonMessage with the reason. */
export function decode(raw: Buffer | null): Envelope {
  if (raw === null || raw.length === 0) throw new PoisonMessage("empty_body", "the message has no body");
  if (raw.length > MAX_BODY_BYTES) {
    throw new PoisonMessage("oversized", `${raw.length} bytes is more than ${MAX_BODY_BYTES}`);
  }
  let body: unknown;
  try {
    body = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(raw));
  } catch (error) {
    throw new PoisonMessage("undecodable", `not UTF-8 JSON (${(error as Error).name})`);
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
  };
}

/** A new event with a new, permanent message id (for the outbox). */
export function newEnvelope(type: string, key: string, payload: Record<string, unknown>, traceId: string | null): Envelope {
  return {
    messageId: crypto.randomUUID(),
    type,
    key,
    payload,
    occurredAt: new Date().toISOString(),
    version: 1,
    traceId: traceId ?? crypto.randomUUID().replaceAll("-", ""),
  };
}
