/** The runtime's Prometheus series, by the same names and labels as the Python runtime's. */

import { Counter, Gauge, Histogram, collectDefaultMetrics, register } from "prom-client";

collectDefaultMetrics(); // process_start_time_seconds among them: how a restart is told

export const OUTCOMES = new Counter({
  name: "eo_consumer_messages_total",
  help: "Deliveries handled, by what became of them.",
  labelNames: ["consumer", "event_type", "outcome", "strategy"],
});
export const TRANSACTION_SECONDS = new Histogram({
  name: "eo_consumer_transaction_seconds",
  help: "Time from BEGIN to COMMIT of one message's transaction.",
  labelNames: ["consumer"],
  buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
});
export const CLAIM_WAIT_SECONDS = new Histogram({
  name: "eo_consumer_claim_wait_seconds",
  help: "Time the marker INSERT took, including any wait on another transaction's claim.",
  labelNames: ["consumer"],
  buckets: [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
});
export const RETRIES = new Counter({
  name: "eo_consumer_retries_total",
  help: "Whole-transaction retries, by cause.",
  labelNames: ["consumer", "cause"],
});
export const ROLLBACKS = new Counter({
  name: "eo_consumer_rollbacks_total",
  help: "Transactions rolled back.",
  labelNames: ["consumer"],
});
export const DEAD_LETTERS = new Counter({
  name: "eo_consumer_dead_letters_total",
  help: "Messages sent to the dead-letter topic.",
  labelNames: ["consumer", "reason"],
});
export const STRATEGY = new Gauge({
  name: "eo_consumer_strategy_info",
  help: "1 for the strategy a consumer runs; this implementation runs only the correct one.",
  labelNames: ["consumer", "strategy"],
});
export const FAULTS_FIRED = new Counter({
  name: "eo_faults_fired_total",
  help: "Injected faults that fired, by fault point.",
  labelNames: ["point"],
});

export const OUTCOME_NAMES = [
  "applied",
  "duplicate",
  "duplicate_with_different_content",
  "ignored",
  "retryable_failure",
  "terminal_failure",
] as const;
export type Outcome = (typeof OUTCOME_NAMES)[number];

/** Every outcome series at zero from the start, so no dashboard panel starts empty. */
export function precreate(consumer: string, eventTypes: Iterable<string>): void {
  STRATEGY.labels(consumer, "correct").set(1);
  for (const eventType of eventTypes) {
    for (const outcome of OUTCOME_NAMES) OUTCOMES.labels(consumer, eventType, outcome, "correct");
  }
}

export { register };
