/**
 * Named fault points, as the Python runtime has them (effectively_once/faults.py): the control
 * endpoint arms one, and the process really crashes (exit 75), raises, fails as a serialization
 * failure, or stalls there. A stall lasts its seconds or until the points are disarmed. Armed
 * points live in memory: a crash forgets them, so "crash once" means once.
 */

import { AsyncLocalStorage } from "node:async_hooks";

import { FAULTS_FIRED } from "./metrics.js";
import { log } from "./log.js";

export const CRASH_EXIT_CODE = 75;
export const RUNTIME_POINTS = ["before_claim", "after_claim", "before_commit", "after_commit_before_ack"] as const;
export const ACTIONS = ["crash", "raise", "stall", "serialization_failure"] as const;
export type FaultAction = (typeof ACTIONS)[number];

export interface Arming {
  action: FaultAction;
  remaining: number | null;
  probability: number;
  stallSeconds: number;
}

export class InjectedFault extends Error {}

/** PostgreSQL's 40001, as a concurrent transaction would raise it: the whole transaction is retried. */
export class InjectedSerializationFailure extends Error {
  readonly code = "40001";
}

/** What a fault point tells about the work in hand: the consumer and the messages' ids and keys. */
export type FaultContext = Record<string, unknown>;

/** Told (point, action, context) just before an armed point fires; a crash waits for it. */
export type FireListener = (point: string, action: FaultAction, context: FaultContext) => Promise<void>;

export class FaultPoints {
  private readonly armedPoints = new Map<string, Arming>();
  private readonly context = new AsyncLocalStorage<FaultContext>();
  onFire: FireListener = async () => undefined;
  readonly fired: Record<string, number> = {};
  private releaseStalls: () => void = () => {};
  private released: Promise<void> = this.newRelease();

  constructor(private readonly exit: (code: number) => never = (code) => process.exit(code)) {}

  private newRelease(): Promise<void> {
    return new Promise((resolve) => {
      this.releaseStalls = resolve;
    });
  }

  /** Run `work` with `context` as what any point it passes tells about the work in hand. */
  within<T>(context: FaultContext, work: () => Promise<T>): Promise<T> {
    return this.context.run(context, work);
  }

  arm(point: string, arming: Arming): void {
    this.armedPoints.set(point, arming);
  }

  /** Disarm one point, or every point; either way, stalls in progress end now. */
  disarm(point?: string): void {
    if (point === undefined) this.armedPoints.clear();
    else this.armedPoints.delete(point);
    this.releaseStalls();
    this.released = this.newRelease();
  }

  armed(): ReadonlyMap<string, Arming> {
    return this.armedPoints;
  }

  /** Arm points from text such as `after_commit_before_ack=crash,before_commit=raise:3`. */
  armFromSpec(spec: string): void {
    for (const item of spec.split(",").map((part) => part.trim()).filter(Boolean)) {
      const [point, rest = ""] = item.split("=", 2);
      const [action, times] = rest.split(":", 2);
      if (!point || !ACTIONS.includes(action as FaultAction)) throw new Error(`EO_FAULTS: cannot read ${item}`);
      const remaining = times === undefined ? 1 : times === "always" ? null : Number(times);
      if (remaining !== null && !(Number.isInteger(remaining) && remaining >= 1)) {
        throw new Error(`EO_FAULTS: ${item}: times must be a positive whole number or "always"`);
      }
      this.arm(point, { action: action as FaultAction, remaining, probability: 1, stallSeconds: 5 });
    }
  }

  /** Pass the point: nothing unless it is armed; then crash, raise, or stall. */
  async hit(point: string): Promise<void> {
    const arming = this.armedPoints.get(point);
    if (arming === undefined) return;
    if (arming.probability < 1 && Math.random() >= arming.probability) return;
    if (arming.remaining !== null) {
      arming.remaining -= 1;
      if (arming.remaining <= 0) this.armedPoints.delete(point);
    }
    this.fired[point] = (this.fired[point] ?? 0) + 1;
    FAULTS_FIRED.labels(point).inc();
    await this.onFire(point, arming.action, this.context.getStore() ?? {});
    switch (arming.action) {
      case "crash":
        log.warn("fault point: crashing", { fault_point: point });
        this.exit(CRASH_EXIT_CODE);
        break;
      case "raise":
        throw new InjectedFault(`injected fault at ${point}`);
      case "serialization_failure":
        throw new InjectedSerializationFailure(`injected serialization failure at ${point}`);
      case "stall": {
        log.warn("fault point: stalling", { fault_point: point, seconds: arming.stallSeconds });
        let timer: NodeJS.Timeout | undefined;
        const elapsed = new Promise<void>((resolve) => {
          timer = setTimeout(resolve, arming.stallSeconds * 1000);
        });
        await Promise.race([elapsed, this.released]);
        clearTimeout(timer);
        break;
      }
    }
  }
}
