"""Carries out a soak: a steady load, the chaos schedule, quiescence, the auditor, a report."""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from auditor import kafka_side
from auditor.dead_letters import read_dead_letters
from auditor.invariants import Anomaly, Query, Verdict, audit, database_reader
from chaos_panel.acting.control_endpoints import ControlError, ControlPlane
from chaos_panel.acting.injector import InjectionError, Injector
from chaos_panel.reading import records
from chaos_panel.reading.telemetry_store import read_telemetry
from infra.launcher import broker_chaos, kafka_connect, postgres_cluster, postgres_pair, processes
from infra.launcher.errors import LaunchError
from infra.launcher.supervisor import Supervisor
from services.orders.load import LoadResult, place_orders
from services.settings import PROJECT_ROOT, Settings
from services.topology import SHARE_GROUP_CONSUMERS, database
from soak import checker, consumer_lag, history, schedule
from soak.schedule import Step

FINAL = ("CONFIRMED", "REJECTED", "CANCELLED")
HISTORY = PROJECT_ROOT / "artifacts" / "soak" / "history.jsonl"
"""Where a soak writes its history unless told (--history): two soaks at once need two files."""
MIN_STEP_INTERVAL = 0.5
"""Seconds between two chaos steps at least."""


@dataclass
class Report:
    seconds: float = 0.0
    load: LoadResult = field(default_factory=LoadResult)
    done: Counter[str] = field(default_factory=Counter)
    """Steps carried out, by kind."""
    refused: dict[str, str] = field(default_factory=dict)
    """Why each step that could not be carried out when its turn came was refused, the last time."""
    not_carried_out: list[str] = field(default_factory=list)
    """Steps of the plan still undone when the run ended (after its extension)."""
    fired: Counter[str] = field(default_factory=Counter)
    """Faults that fired, by action (from telemetry)."""
    restarts: int = 0
    duplicates: int = 0
    redeliveries: int = 0
    dead_letters: int = 0
    not_terminal: int = 0
    verdict: Verdict | None = None
    earlier: list[Anomaly] = field(default_factory=list)
    """Anomalies on orders this soak did not place (a lab's leftovers): shown, not counted."""

    @property
    def anomalies(self) -> list[Anomaly]:
        return [a for a in self.verdict.anomalies if a not in self.earlier] if self.verdict else []

    kafka_side: kafka_side.KafkaSide | None = None
    """What Kafka holds against the databases, as the auditor reads it (lost and phantom events)."""
    findings: checker.Findings | None = None
    """What the independent checker found in the history (soak/checker.py)."""

    @property
    def agree(self) -> bool:
        """The auditor and the checker give the same verdict: both clean, or both not."""
        return self.findings is not None and self.findings.clean == self.auditor_clean

    @property
    def auditor_clean(self) -> bool:
        return self.verdict is not None and not self.anomalies and self.kafka_side is not None and self.kafka_side.clean

    @property
    def passed(self) -> bool:
        return self.auditor_clean and self.not_terminal == 0 and self.findings is not None and self.findings.clean


class Soak:
    def __init__(
        self,
        settings: Settings,
        say: Callable[[str], None] = print,
        seed: int = 17,
        crashes: int = 0,
        leader_kills: int = 2,
        history_path: Path = HISTORY,
    ) -> None:
        self.seed, self.crashes, self.leader_kills = seed, crashes, leader_kills
        self.history_path = history_path
        supervisor = Supervisor(settings.EO_STATE_DIR)
        self.supervisor = supervisor if supervisor.is_running() else None
        if self.supervisor is not None and settings.uses_own_kafka:  # the cluster that runs, not the one asked for
            settings = settings.model_copy(update={"BROKERS": broker_chaos.supervised_nodes(self.supervisor)})
        if self.supervisor is not None and settings.uses_own_postgres:  # the pair that runs, whatever POSTGRES says
            running = {info["name"] for info in self.supervisor.all_info()}
            if set(postgres_cluster.node_names(settings.model_copy(update={"POSTGRES": "ha"}))) <= running:
                settings = settings.model_copy(update={"POSTGRES": "ha"})
        self.settings = settings
        self.say = say
        self.api = f"http://127.0.0.1:{settings.ORDERS_API_PORT}"
        self.control = ControlPlane(
            processes.control_urls(settings),
            f"http://127.0.0.1:{settings.PAYMENT_PROVIDER_PORT}",
            f"http://127.0.0.1:{settings.MAIL_PORT}",
            self.api,
            sandbox_password=settings.SANDBOX_ADMIN_PASSWORD,
        )
        self.injector = Injector(settings.kafka_bootstrap_servers)
        self.query: Query = database_reader(lambda name: settings.auditor_database_url(database(name)))
        self.random = random.Random(seed)
        self._orders_before: list[str] = []

    # The plan ----------------------------------------------------------------------------------

    def plan(self) -> list[Step]:
        states = self.control.states()
        down = [state.name for state in states if not state.up]
        if down:
            raise SystemExit(f"soak: these processes do not answer: {', '.join(down)} (run `make up`)")
        points = {state.name: state.points for state in states}
        consumers = [state.name for state in states if state.consumer]
        own_infrastructure = self.supervisor is not None and self.settings.uses_own_kafka
        return schedule.plan(
            points,
            consumers,
            infrastructure_restarts=own_infrastructure,
            brokers=self.settings.BROKERS,
            leader_kills=self.leader_kills,
            crashes=self.crashes,
            seed=self.seed,
            connect_kills=2 if self._runs_connect() else 0,
            failovers=2 if self._runs_a_pair() else 0,
            share_consumers=processes.share_group_instances(self.settings),
        )

    def _runs_a_pair(self) -> bool:
        """Whether PostgreSQL runs as a primary and a standby here (POSTGRES=ha)."""
        return self.supervisor is not None and self.settings.POSTGRES == "ha"

    def _runs_connect(self) -> bool:
        """Whether Debezium relays here (RELAY=debezium): the supervisor runs Kafka Connect."""
        if self.supervisor is None:
            return False
        return any(info["name"] == processes.KAFKA_CONNECT for info in self.supervisor.all_info())

    def carry_out(self, step: Step) -> None:
        if step.kind == schedule.PROCESS_CRASH:
            self.control.arm(step.target, step.point, "crash", times=1)
        elif step.kind == schedule.REWIND:
            since = (datetime.now(UTC) - timedelta(seconds=60)).isoformat()
            self.control.rewind(step.target, since)
        elif step.kind == schedule.LOCK_EXPIRY:
            stall = self.settings.SHARE_LOCK_SECONDS + 2
            self.control.arm(step.target, "before_claim", "stall", times=1, stall_seconds=stall)
        elif step.kind == schedule.REPUBLISH:
            recent = records.recent_orders(self.query, 20)
            if not recent:
                raise InjectionError("no order yet to republish")
            events = records.events_of_order(self.query, self.random.choice(recent).order_id)
            self.injector.republish(self.random.choice(events), copies=5, spread=True)
        elif step.kind == schedule.PROVIDER_TIMEOUT:
            self.control.set_sandbox_faults("payment-provider", {"timeout_after_charge": 2, "timeout_seconds": 4})
        elif self.supervisor is None:
            raise InjectionError(f"{step.kind} needs the launcher's own Kafka and PostgreSQL")
        elif step.kind in schedule.CLUSTER_FAULTS:
            self._break_the_cluster(step, self.supervisor)
        elif step.kind == schedule.DATABASE_FAILOVER:
            pair, supervisor = postgres_pair.running_pair(self.settings)
            bindir = postgres_cluster.find_bindir()
            if bindir is None:
                raise InjectionError("no PostgreSQL server binaries found")
            self.say(f"  {postgres_pair.failover(bindir, pair, supervisor, lambda _: None).describe()}")
        elif step.kind == schedule.CONNECT_KILL:
            pid = int(self.supervisor.info(processes.KAFKA_CONNECT)["pid"])
            if not pid:
                raise InjectionError("Kafka Connect's worker is not running")
            os.kill(pid, signal.SIGKILL)  # the supervisor starts it again
        else:
            name = processes.KAFKA if step.kind == schedule.BROKER_RESTART else processes.POSTGRES
            self.supervisor.stop(name)
            self.supervisor.start(name)

    def _break_the_cluster(self, step: Step, supervisor: Supervisor) -> None:
        if step.kind == schedule.CONTROLLER_RESTART:
            fault = broker_chaos.restart_controller(self.settings, supervisor)
        else:
            topic, partition = step.target.rsplit("/", 1)
            if step.kind == schedule.LEADER_KILL:
                fault = broker_chaos.kill_leader(self.settings, supervisor, topic, int(partition))
            else:
                node = broker_chaos.partition_leader(self.settings, topic, int(partition))
                fault = broker_chaos.freeze(self.settings, supervisor, node, step.seconds)
        self.say(f"  {fault.describe()}")

    # The run -----------------------------------------------------------------------------------

    def run(self, duration: float, rate: float, count: int) -> Report:
        report = Report()
        steps = self.plan()
        self._orders_before = [row[0] for row in self.query("orders", "SELECT order_id FROM customer_order")]
        started = time.time()
        # The plan spreads over the first 70% of the run: the rest is room for steps tried again later.
        interval = max(MIN_STEP_INTERVAL, duration * 0.7 / len(steps))
        self.say(
            f"soak: {duration:.0f} s at {rate:g} orders/s on {self.settings.BROKERS} Kafka node(s); "
            f"{len(steps)} chaos steps, one every {interval:.1f} s (seed {self.seed}: the same seed, the same schedule)"
        )
        stop = threading.Event()
        loader = threading.Thread(
            target=place_orders,
            kwargs={"url": self.api, "rate": rate, "count": count, "quiet": True, "stop": stop, "result": report.load},
            daemon=True,
        )
        loader.start()
        queue = list(steps)
        next_step = time.monotonic()
        deadline = time.monotonic() + duration
        # Steps that could not be carried out when their turn came, and steps that block (a restart),
        # can push the plan past DURATION (more so on a busy machine): the load then goes on until
        # the plan is done, what is left tried at the shortest interval, up to twice as long again;
        # what is still left then is reported, never dropped silently.
        latest = deadline + 2 * duration
        extended = False
        while loader.is_alive() and (time.monotonic() < deadline or (queue and time.monotonic() < latest)):
            if not extended and queue and time.monotonic() >= deadline:
                extended = True
                self._log(started, f"{len(queue)} chaos steps still to carry out: the load goes on until they are")
            if time.monotonic() >= next_step and queue:
                step = queue.pop(0)
                try:
                    self.carry_out(step)
                    report.done[step.kind] += 1
                    self._log(started, step.describe())
                except (ControlError, InjectionError, LaunchError) as error:
                    report.refused[step.describe()] = str(error)
                    self._log(started, f"{step.describe()}: not now ({error}); later")
                    queue.append(step)  # a process may be restarting: try again later
                next_step = time.monotonic() + (MIN_STEP_INTERVAL if extended else interval)
            self._progress(started, duration, report)
            time.sleep(0.25)
        stop.set()
        loader.join()
        report.not_carried_out = [step.describe() for step in queue]
        self._progress(started, duration, report)
        sys.stdout.write("\n")
        self.control.reset()  # points armed but not reached are disarmed before the count
        self.say("soak: load stopped; waiting for every saga to finish")
        report.not_terminal = self._wait_quiet(timeout=300)
        report.seconds = time.time() - started
        report.verdict = audit(self.query)
        known = set(self._orders_before)
        report.earlier = [a for a in report.verdict.anomalies if a.subject in known]
        bootstrap = self.settings.kafka_bootstrap_servers
        held = kafka_side.check(self.query, bootstrap, read_dead_letters(bootstrap))
        report.kafka_side = held.of_orders(report.load.order_ids)
        lines = history.write(
            self.history_path, history.reader(self._auditor_url), report.load, self.settings.kafka_bootstrap_servers
        )
        report.findings = checker.check(checker.load(self.history_path))
        where = self.history_path.resolve()
        shown = where.relative_to(PROJECT_ROOT) if where.is_relative_to(PROJECT_ROOT) else where
        self.say(f"soak: history of {lines} lines in {shown}, judged by soak/checker.py")
        self._count_telemetry(report, since=started)
        return report

    def _auditor_url(self, name: str) -> str:
        return self.settings.auditor_database_url(database(name))

    def _log(self, started: float, line: str) -> None:
        """A line per event: above the progress bar on a terminal, alone in a log."""
        prefix = "\r" + " " * 78 + "\r" if sys.stdout.isatty() else ""
        sys.stdout.write(f"{prefix}  {time.time() - started:6.1f} s  {line}\n")
        sys.stdout.flush()

    def _progress(self, started: float, duration: float, report: Report) -> None:
        if not sys.stdout.isatty():
            return
        elapsed = min(duration, time.time() - started)
        filled = int(30 * elapsed / duration)
        sys.stdout.write(
            f"\r  [{'#' * filled}{'.' * (30 - filled)}] {elapsed:4.0f}/{duration:.0f} s"
            f"  orders {len(report.load.order_ids)}  chaos steps {sum(report.done.values())}   "
        )
        sys.stdout.flush()

    def _wait_quiet(self, timeout: float) -> int:
        """Until no order is in flight, every outbox is published and every consumer group has
        consumed every event, three checks in a row."""
        deadline, calm = time.monotonic() + timeout, 0
        in_flight = 0
        while time.monotonic() < deadline and calm < 3:
            try:
                in_flight = int(
                    self.query("orders", f"SELECT count(*) FROM customer_order WHERE status NOT IN {FINAL}")[0][0]
                )
                unpublished = sum(
                    int(self.query(db, "SELECT count(*) FROM outbox WHERE published_at IS NULL")[0][0])
                    for db in records.OUTBOX_DATABASES
                )
            except Exception as error:  # the database may still be coming back
                self.say(f"soak: waiting for the databases ({type(error).__name__})")
                calm = 0
                time.sleep(1)
                continue
            share_groups = SHARE_GROUP_CONSUMERS if self.settings.SHARE_GROUPS == "on" else ()
            behind = (
                consumer_lag.unconsumed(self.settings.kafka_bootstrap_servers, self.query, share_groups)
                if in_flight == 0
                else -1
            )
            calm = calm + 1 if in_flight == 0 and unpublished == 0 and behind == 0 else 0
            if calm == 0 and int(deadline - time.monotonic()) % 10 == 0:
                self.say(
                    f"soak: {in_flight} orders in flight, {unpublished} outbox rows unpublished"
                    + (f", {behind} events not yet consumed" if behind > 0 else "")
                    + (self._connectors_not_running() if unpublished and self._runs_connect() else "")
                )
                if not unpublished:  # everything is on Kafka: say which groups it waits in
                    for line in consumer_lag.lagging(self.settings.kafka_bootstrap_servers, share_groups):
                        self.say(f"soak:   waiting in {line}")
            time.sleep(1)
        return in_flight

    def _connectors_not_running(self) -> str:
        """Where Debezium relays and rows wait: each connector that is not RUNNING, and its state."""
        states = kafka_connect.connector_states(self.settings.KAFKA_CONNECT_PORT)
        if not states:
            return "; Kafka Connect's worker does not answer"
        stopped = {name: state for name, state in states.items() if state != "RUNNING"}
        return "".join(f"; connector {name} {state}" for name, state in sorted(stopped.items()))

    def _count_telemetry(self, report: Report, since: float) -> None:
        told = read_telemetry(self.settings.kafka_bootstrap_servers, since=since)
        report.fired = Counter(str(r.get("action")) for r in told if r.get("kind") == "fault")
        report.restarts = sum(1 for r in told if r.get("kind") == "started")
        deliveries = Counter(
            (str(r.get("consumer")), str(r.get("message_id")))
            for r in told
            if r.get("kind") == "delivery" and r.get("outcome") in ("applied", "duplicate")
        )
        report.redeliveries = sum(n - 1 for n in deliveries.values())
        report.duplicates = sum(1 for r in told if r.get("kind") == "delivery" and r.get("outcome") == "duplicate")
        report.dead_letters = sum(
            1 for r in told if r.get("kind") == "delivery" and r.get("outcome") == "terminal_failure"
        )


def summary(report: Report) -> list[str]:
    verdict = report.verdict
    lines = [
        f"soak finished in {report.seconds:.0f} s",
        f"  orders placed            {len(report.load.order_ids)}"
        + (
            f" ({sum(report.load.failures.values())} refused while the system was down)" if report.load.failures else ""
        ),
        "  faults injected          " + (", ".join(f"{kind} {n}" for kind, n in sorted(report.done.items())) or "none"),
        "  not carried out          " + (", ".join(report.not_carried_out) or "none"),
        *(f"    ✗ {step}: {report.refused.get(step, 'its turn never came')}" for step in report.not_carried_out),
        f"  crashes that fired       {report.fired.get('crash', 0)} (processes started again: {report.restarts})",
        f"  redeliveries             {report.redeliveries}",
        f"  duplicates absorbed      {report.duplicates}",
        f"  dead letters             {report.dead_letters}",
        f"  anomalies                {len(report.anomalies) if verdict else '?'} (must be 0)",
        f"  orders not terminal      {report.not_terminal} (must be 0)",
    ]
    lines += [f"    ✗ {a.invariant}: {a.subject}: {a.evidence}" for a in report.anomalies[:20]]
    if report.kafka_side is not None:
        lines += [f"  {line}" for line in list(kafka_side.report(report.kafka_side))[:30]]
    if report.earlier:
        lines.append(f"  ({len(report.earlier)} anomalies on orders placed before the soak, not counted:")
        lines += [f"     {a.invariant}: {a.subject})" for a in report.earlier[:5]]
    if report.findings is not None:
        lines += [f"  {line}" for line in checker.report(report.findings)]
        lines.append(f"  auditor and checker      {'agree' if report.agree else 'DISAGREE'}")
    lines.append("SOAK: PASSED" if report.passed else "SOAK: FAILED")
    return lines
