/** Structured logs: one JSON object a line on stdout, with ids and never a payload. */

type Fields = Record<string, unknown>;

let base: Fields = {};

export function setLogFields(fields: Fields): void {
  base = { ...base, ...fields };
}

function write(level: string, message: string, fields: Fields): void {
  process.stdout.write(`${JSON.stringify({ time: new Date().toISOString(), level, message, ...base, ...fields })}\n`);
}

export const log = {
  info: (message: string, fields: Fields = {}) => write("INFO", message, fields),
  warn: (message: string, fields: Fields = {}) => write("WARNING", message, fields),
  error: (message: string, fields: Fields = {}) => write("ERROR", message, fields),
};
