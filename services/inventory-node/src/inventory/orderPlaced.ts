/**
 * The OrderPlaced payload as inventory reads it, with the saga's field limits
 * (services/saga_fields.py: what the orders API accepts, every service downstream accepts).
 * Strict: no number coerced from a string; extra fields are kept, not refused. No I/O here.
 */

export const MAX_LINES = 20;
export const MAX_QUANTITY = 100;
export const MAX_AMOUNT_CENTS = 100_000_000;
const MAX_KEY_LENGTH = 255;

export interface Line {
  sku: string;
  quantity: number;
}

export interface OrderPlaced {
  order_id: string;
  customer_email: string;
  payment_method: string;
  amount_cents: number;
  lines: Line[];
}

const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const ATEXT = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]";
const LOCAL_PART = new RegExp(`^${ATEXT}+(?:\\.${ATEXT}+)*$`);
const LABEL = /^[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?$/;
const SKU = /^sku-[a-z0-9-]{1,40}$/;
const PAYMENT_METHOD = /^pm_[a-z0-9_]{1,60}$/;

/** Why `address` is not one every service of the saga accepts (RFC 5322 dot-atom, RFC 5321 lengths), or null. */
export function emailProblem(address: string): string | null {
  if (address.length > 254) return "an email address is at most 254 characters (RFC 5321)";
  const at = address.lastIndexOf("@");
  const local = at < 0 ? "" : address.slice(0, at);
  const domain = at < 0 ? "" : address.slice(at + 1);
  if (!local || !domain) return "an email address needs a local part, an @ and a domain";
  if (local.length > 64) return "the part before the @ is at most 64 characters (RFC 5321)";
  if (!LOCAL_PART.test(local)) {
    return "the part before the @ may hold letters, digits, !#$%&'*+/=?^_`{|}~- and single dots inside";
  }
  const labels = domain.split(".");
  if (domain.length > 253 || labels.length < 2) return "the domain needs at least two labels and at most 253 characters";
  if (!labels.every((label) => label.length <= 63 && LABEL.test(label))) {
    return "each domain label is 1-63 letters, digits or inner hyphens";
  }
  if (/^\d+$/.test(labels[labels.length - 1] ?? "")) return "the top-level domain cannot be all digits";
  return null;
}

class Misfit extends Error {}

function field<T>(where: string, check: () => T): T {
  try {
    return check();
  } catch (error) {
    if (error instanceof Misfit) throw new Misfit(`${where}: ${error.message}`);
    throw error;
  }
}

function text(value: unknown): string {
  if (typeof value !== "string") throw new Misfit("Input should be a valid string");
  return value;
}

function matching(value: unknown, pattern: RegExp): string {
  const found = text(value);
  if (!pattern.test(found)) throw new Misfit(`String should match pattern '${pattern.source}'`);
  return found;
}

function whole(value: unknown, low: number, high: number): number {
  if (typeof value !== "number" || !Number.isInteger(value)) throw new Misfit("Input should be a valid integer");
  if (value < low || value > high) throw new Misfit(`Input should be between ${low} and ${high}`);
  return value;
}

function orderId(value: unknown): string {
  const id = text(value);
  if (id.length < 1 || id.length > MAX_KEY_LENGTH) throw new Misfit(`String should have 1 to ${MAX_KEY_LENGTH} characters`);
  if (LONE_SURROGATE.test(id)) throw new Misfit("text must be valid Unicode (it holds a lone UTF-16 surrogate)");
  if (CONTROL.test(id)) throw new Misfit("text must not hold control characters (NUL, line breaks, escapes)");
  if (!id.trim()) throw new Misfit("must not be blank");
  return id;
}

function email(value: unknown): string {
  const address = text(value);
  const problem = emailProblem(address);
  if (problem) throw new Misfit(problem);
  return address;
}

/** The payload as OrderPlaced, or an Error naming the first field that does not fit. */
export function readOrderPlaced(payload: Readonly<Record<string, unknown>>): OrderPlaced {
  try {
    const lines = field("lines", () => {
      const value = payload["lines"];
      if (!Array.isArray(value)) throw new Misfit("Input should be a valid list");
      if (value.length < 1 || value.length > MAX_LINES) throw new Misfit(`List should have 1 to ${MAX_LINES} items`);
      return value;
    });
    return {
      order_id: field("order_id", () => orderId(payload["order_id"])),
      customer_email: field("customer_email", () => email(payload["customer_email"])),
      payment_method: field("payment_method", () => matching(payload["payment_method"], PAYMENT_METHOD)),
      amount_cents: field("amount_cents", () => whole(payload["amount_cents"], 1, MAX_AMOUNT_CENTS)),
      lines: lines.map((line: unknown, index) =>
        field(`lines.${index}`, () => {
          if (typeof line !== "object" || line === null || Array.isArray(line)) throw new Misfit("Input should be an object");
          const fields = line as Record<string, unknown>;
          return {
            sku: field("sku", () => matching(fields["sku"], SKU)),
            quantity: field("quantity", () => whole(fields["quantity"], 1, MAX_QUANTITY)),
          };
        }),
      ),
    };
  } catch (error) {
    if (error instanceof Misfit) throw new Error(`OrderPlaced payload: ${error.message}`);
    throw error;
  }
}
