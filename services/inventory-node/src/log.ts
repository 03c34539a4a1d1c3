/** Structured logs: one JSON object a line on stdout, with ids and never a payload. */

type Fields = Record<string, unknown>;

const LEVELS = { DEBUG: 10, INFO: 20, WARNING: 30, ERROR: 40, CRITICAL: 50 } as const;
const threshold = LEVELS[(process.env["LOG_LEVEL"] ?? "INFO") as keyof typeof LEVELS] ?? LEVELS.INFO;
/** LOG_LEVEL, as the Python runtime reads it (DEBUG, INFO, WARNING, ERROR, CRITICAL). */

let base: Fields = {};

export function setLogFields(fields: Fields): void {
  base = { ...base, ...fields };
}

function write(level: keyof typeof LEVELS, message: string, fields: Fields): void {
  if (LEVELS[level] < threshold) return;
  process.stdout.write(`${JSON.stringify({ time: new Date().toISOString(), level, message, ...base, ...fields })}\n`);
}

export const log = {
  debug: (message: string, fields: Fields = {}) => write("DEBUG", message, fields),
  info: (message: string, fields: Fields = {}) => write("INFO", message, fields),
  warn: (message: string, fields: Fields = {}) => write("WARNING", message, fields),
  error: (message: string, fields: Fields = {}) => write("ERROR", message, fields),
};
