"""The panel's front page as a picture: every part of the system where the architecture diagram
puts it, with what it is doing now. Pure: it takes what was read (map_readings.py) and returns
boxes and arrows to draw (templates/fragments/map.html); no I/O here.

The layout is fixed, as a diagram's is: the orders API writes the orders database; each service
database's outbox is read by the relay, which publishes to the four event topics; each topic
feeds the consumers that read it (services/topology.py says which), and each consumer writes
its own service's database; the executors carry the payment and notification databases' pending
work to the two sandboxes. The auditor reads every database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.topology import CONSUMERS, EVENT_TOPICS

WIDTH, HEIGHT = 1300, 790

OUTBOX_DATABASES = ("orders", "inventory", "payment", "notification")
CONSUMER_PROCESS = {
    "orders-saga-v1": "orders-saga",
    "inventory-reservation-v1": "inventory",
    "payment-authorization-v1": "payment",
    "notification-dispatch-v1": "notification",
    "sales-projection-v1": "sales-projection",
}
"""Consumer name -> the process that runs it (the launcher's and compose's program names)."""
EXECUTORS = {
    "payment-executor": ("payment executor", "payment", "payment-provider"),
    "notification-dispatcher": ("mail dispatcher", "notification", "mail"),
}
"""Executor process -> (its title, the database whose pending work it carries, the sandbox it calls)."""
RECENTLY = 30.0
"""Seconds after a start during which a process box says it has just come back."""


@dataclass(frozen=True)
class ProcessReading:
    """One process as the panel last heard it (several replicas of one are summed)."""

    up: bool
    restarts: int = 0
    uptime_seconds: float | None = None
    strategy: str | None = None
    armed: tuple[str, ...] = ()
    """Each armed fault as `action @ point`."""
    totals: dict[str, float] = field(default_factory=dict)
    """Outcome -> deliveries counted since the process started."""
    stalled: tuple[str, ...] = ()
    """Partitions it holds with messages waiting and none consumed (`topic/partition`)."""


@dataclass(frozen=True)
class Readings:
    """Everything the map shows, as read at one moment; a missing figure is simply not drawn."""

    processes: dict[str, ProcessReading]
    rates: dict[tuple[str, str], float] = field(default_factory=dict)
    """(consumer, outcome) -> deliveries a second over the last minute (Prometheus)."""
    lag: dict[tuple[str, str], float] = field(default_factory=dict)
    """(consumer, topic) -> messages not yet consumed."""
    backlog: dict[str, float] = field(default_factory=dict)
    """Database -> outbox rows not yet published."""
    published_per_second: float | None = None
    parked: dict[str, int] = field(default_factory=dict)
    """Executor process -> work parked for an operator."""
    verdict: str = "unknown"
    """green, red, or unknown (the auditor could not answer)."""
    anomalies: int = 0
    relay: str = "builtin"
    postgres: list[dict[str, Any]] = field(default_factory=list)
    """POSTGRES=ha: each node as the pair's control endpoint tells it (node, role, replication);
    empty with one server."""
    synchronous: bool | None = None


LINE_TOP, LINE_STEP, PADDING, BOTTOM = 46, 18, 12, 6
TITLE_CHAR, TOPIC_CHAR, LINE_CHAR = 10.5, 9.6, 8.0
"""Widths in viewBox units that hold one character of a title (18 px bold; a topic's, 16 px
monospace) and of a line (15 px): a longer text is cut with an ellipsis."""
KEEP_FIRST = {"bad": 3, "warn": 2, "applied": 2, "rates": 1, "totals": 1}
"""When a box has more lines than room, the lines kept first, by tone; the rest (muted, mono) go."""


def fit(text: str, width: float, per_char: float) -> str:
    """`text`, cut with an ellipsis to what `width` holds."""
    room = max(1, int(width // per_char))
    return text if len(text) <= room else text[: room - 1] + "…"


@dataclass(frozen=True)
class Line:
    text: str
    tone: str = ""
    """A CSS class (panel.css): rates, totals, applied, warn, bad, muted, mono, or none."""


@dataclass
class Box:
    id: str
    kind: str
    """api, database, relay, topic, consumer, executor, sandbox, auditor"""
    x: int
    y: int
    w: int
    h: int
    title: str
    lines: list[Line] = field(default_factory=list)
    state: str = "up"
    """up, down, back (restarted less than RECENTLY ago), teaching (an unsafe strategy), idle"""
    process: str = ""
    """The process to act on when the box is clicked; empty for databases and topics."""

    @property
    def mark_room(self) -> float:
        """Room kept before a process's title for its state mark (✖, ↻, ⚠)."""
        return 2 * self.title_char if self.process else 0.0

    @property
    def title_char(self) -> float:
        return TOPIC_CHAR if self.kind == "topic" else TITLE_CHAR

    @property
    def room(self) -> int:
        """How many lines fit under the title."""
        return (self.h - BOTTOM - LINE_TOP) // LINE_STEP + 1

    def fitted(self) -> Box:
        """The box with its title and lines cut to its width, and only as many lines as it holds,
        the most telling first (KEEP_FIRST), in their order."""
        keep = sorted(range(len(self.lines)), key=lambda n: -KEEP_FIRST.get(self.lines[n].tone, 0))[: self.room]
        inner = self.w - 2 * PADDING
        self.title = fit(self.title, inner - self.mark_room, self.title_char)
        self.lines = [
            Line(fit(line.text, inner, LINE_CHAR), line.tone) for n, line in enumerate(self.lines) if n in keep
        ]
        return self

    @property
    def left(self) -> tuple[int, int]:
        return self.x, self.y + self.h // 2

    @property
    def right(self) -> tuple[int, int]:
        return self.x + self.w, self.y + self.h // 2


@dataclass(frozen=True)
class Arrow:
    points: tuple[tuple[int, int], ...]
    label: str = ""
    tone: str = ""
    curved: bool = True

    @property
    def path(self) -> str:
        (x0, y0), *rest = self.points
        if self.curved and len(rest) == 1:
            (x1, y1) = rest[0]
            middle = (x0 + x1) // 2
            return f"M{x0},{y0} C{middle},{y0} {middle},{y1} {x1},{y1}"
        return f"M{x0},{y0} " + " ".join(f"L{x},{y}" for x, y in rest)

    @property
    def label_at(self) -> tuple[int, int]:
        """Where the label sits: just before the arrow's head."""
        (x, y) = self.points[-1]
        return x - 8, y - 6


@dataclass
class SystemMap:
    boxes: list[Box]
    arrows: list[Arrow]
    width: int = WIDTH
    height: int = HEIGHT
    line_top: int = LINE_TOP
    line_step: int = LINE_STEP


def _rate(value: float) -> str:
    return f"{value:.1f}/s" if value < 100 else f"{value:.0f}/s"


def _count(value: float) -> str:
    return f"{value:,.0f}"


def _process_box(box: Box, reading: ProcessReading | None) -> Box:
    """A process's box takes its state: down, just back, teaching, or up; and its restarts."""
    if reading is None:
        box.state = "down"
        box.lines.append(Line("not heard from", "bad"))
        return box
    if not reading.up:
        box.state = "down"
        box.lines.insert(0, Line("DOWN: being restarted", "bad"))
    elif reading.strategy not in (None, "correct"):
        box.state = "teaching"
    elif reading.uptime_seconds is not None and reading.uptime_seconds < RECENTLY and reading.restarts:
        box.state = "back"
        box.lines.append(Line(f"↻ back {reading.uptime_seconds:.0f} s ago (restart {reading.restarts})", "warn"))
    if reading.restarts and box.state != "back":
        box.lines.append(Line(f"↻ {reading.restarts} restart{'s' if reading.restarts != 1 else ''}", "muted"))
    for armed in reading.armed[:1]:
        box.lines.append(
            Line(f"⚡ {armed}" + (f" (+{len(reading.armed) - 1})" if len(reading.armed) > 1 else ""), "bad")
        )
    return box


def _consumer_box(consumer: str, y: int, readings: Readings) -> Box:
    process = CONSUMER_PROCESS.get(consumer, consumer)
    reading = readings.processes.get(process)
    box = Box(f"consumer-{process}", "consumer", 1030, y, 260, 116, process, process=process)
    box.lines.append(Line(consumer, "mono"))
    applied, duplicate = readings.rates.get((consumer, "applied")), readings.rates.get((consumer, "duplicate"))
    if applied is not None or duplicate is not None:
        box.lines.append(Line(f"{_rate(applied or 0)} applied · {_rate(duplicate or 0)} dup", "rates"))
    failing = readings.rates.get((consumer, "failed"))
    if failing:
        box.lines.append(Line(f"{_rate(failing)} failing", "bad"))
    if reading is not None and reading.up:
        totals = reading.totals
        applied_total, duplicate_total = _count(totals.get("applied", 0)), _count(totals.get("duplicate", 0))
        box.lines.append(Line(f"Σ {applied_total} applied · {duplicate_total} dup", "totals"))
        other_content = totals.get("duplicate_with_different_content", 0)
        if other_content:
            box.lines.append(Line(f"⚠ {_count(other_content)} dup with other content", "bad"))
        if reading.stalled:
            more = f" (+{len(reading.stalled) - 1})" if len(reading.stalled) > 1 else ""
            box.lines.append(Line(f"⚠ stalled: {reading.stalled[0]}{more}", "bad"))
        if reading.strategy not in (None, "correct"):
            box.lines.append(Line(f"strategy: {reading.strategy}", "bad"))
    return _process_box(box, reading)


def _postgres_box(readings: Readings) -> Box:
    """The pair every database lives on: which node is the primary, and how the standby follows."""
    mode = "?" if readings.synchronous is None else ("synchronous" if readings.synchronous else "asynchronous")
    box = Box("postgres", "database", 20, 190, 190, 140, "PostgreSQL pair", [Line(f"{mode} standby", "muted")])
    for node in sorted(readings.postgres, key=lambda node: node.get("role") != "primary"):
        role = str(node.get("role", "unknown"))
        tone = {"primary": "applied", "standby": "muted"}.get(role, "bad")
        box.lines.append(Line(f"node {node.get('node')}: {role}", tone))
        if role == "standby":
            following = str(node.get("replication", ""))
            box.lines.append(Line(following, "warn" if following.startswith("detached") else "muted"))
    box.state = "up" if any(node.get("role") == "primary" for node in readings.postgres) else "down"
    return box


def build(readings: Readings) -> SystemMap:
    """The boxes and arrows for `readings`."""
    boxes: list[Box] = []
    arrows: list[Arrow] = []

    api = _process_box(
        Box(
            "orders-api",
            "api",
            20,
            40,
            190,
            100,
            "Orders API",
            [Line("POST /orders", "mono"), Line("idempotency key")],
            process="orders-api",
        ),
        readings.processes.get("orders-api"),
    )
    boxes.append(api)

    databases: dict[str, Box] = {}
    for n, name in enumerate(OUTBOX_DATABASES):
        box = Box(f"db-{name}", "database", 260, 30 + n * 150, 210, 100, f"{name} DB")
        waiting = readings.backlog.get(name)
        box.lines.append(
            Line("outbox: " + ("?" if waiting is None else f"{_count(waiting)} waiting"), "warn" if waiting else "")
        )
        box.lines.append(Line("markers · business rows", "muted"))
        databases[name] = box
        boxes.append(box)
    arrows.append(Arrow((api.right, databases["orders"].left)))

    relay_title = "Debezium relay" if readings.relay == "debezium" else "outbox relay"
    relay = Box("outbox-relay", "relay", 510, 215, 200, 150, relay_title, process="outbox-relay")
    if readings.relay == "debezium":
        relay.lines.append(Line("Connect reads the WAL", "muted"))
        relay.lines.append(Line("outbox-relay marks", "muted"))
    else:
        relay.lines.append(Line("publishes, then marks", "muted"))
    if readings.published_per_second is not None:
        relay.lines.append(Line(f"{_rate(readings.published_per_second)} published", "applied"))
    boxes.append(_process_box(relay, readings.processes.get("outbox-relay")))
    for name, box in databases.items():
        arrows.append(Arrow((box.right, (relay.x, relay.y + 30 + OUTBOX_DATABASES.index(name) * 30))))

    topics: dict[str, Box] = {}
    for n, topic in enumerate(EVENT_TOPICS):
        box = Box(f"topic-{topic}", "topic", 750, 40 + n * 150, 210, 80, topic, [Line("Kafka topic", "muted")])
        topics[topic] = box
        boxes.append(box)
        arrows.append(Arrow(((relay.x + relay.w, relay.y + 30 + n * 30), box.left)))

    readers: dict[str, list[str]] = {consumer.name: list(consumer.topics) for consumer in CONSUMERS}
    for n, consumer in enumerate(CONSUMERS):
        box = _consumer_box(consumer.name, 10 + n * 132, readings)
        boxes.append(box)
        feeds = readers[consumer.name]
        for k, topic in enumerate(feeds):
            port = box.y + (k + 1) * box.h // (len(feeds) + 1)
            lag = readings.lag.get((consumer.name, topic))
            arrows.append(
                Arrow(
                    (topics[topic].right, (box.x, port)),
                    f"lag {_count(lag)}" if lag else "",
                    "warn" if lag else "",
                )
            )

    for n, (process, (title, database_name, sandbox)) in enumerate(EXECUTORS.items()):
        x = 260 + n * 490
        reading = readings.processes.get(process)
        executor = Box(f"executor-{process}", "executor", x, 672, 215, 100, title, process=process)
        executor.lines.append(Line(f"{database_name} DB's calls", "muted"))
        parked = readings.parked.get(process, 0)
        executor.lines.append(Line(f"parked: {_count(parked)}", "bad" if parked else "muted"))
        boxes.append(_process_box(executor, reading))
        outside = Box(f"sandbox-{sandbox}", "sandbox", x + 245, 672, 215, 100, sandbox, process=sandbox)
        outside.lines.append(Line("outside world: sandbox", "muted"))
        outside.lines.append(Line("same key, same answer", "muted"))
        boxes.append(_process_box(outside, readings.processes.get(sandbox)))
        arrows.append(Arrow((executor.right, outside.left), curved=False))
        source = databases[database_name]
        if n == 0:  # down the left edge, past the notification database
            arrows.append(
                Arrow((source.left, (240, source.left[1]), (240, executor.left[1]), executor.left), curved=False)
            )
        else:  # down from the notification database, then along to its executor
            below = (source.x + 100, source.y + source.h)
            arrows.append(Arrow((below, (below[0], 630), (x + 100, 630), (x + 100, executor.y)), curved=False))

    verdict_lines = {
        "green": [Line("green: nothing lost,", "applied"), Line("nothing doubled", "applied")],
        "red": [
            Line(f"red: {readings.anomalies} anomal{'y' if readings.anomalies == 1 else 'ies'}", "bad"),
            Line("verdict below", "muted"),
        ],
    }.get(readings.verdict, [Line("waiting for answers", "muted")])
    auditor = Box(
        "auditor",
        "auditor",
        20,
        440,
        190,
        110,
        "Auditor",
        verdict_lines,
        state={"green": "up", "red": "down"}.get(readings.verdict, "idle"),
    )
    auditor.lines.append(Line("reads every database", "muted"))
    boxes.append(auditor)
    if readings.postgres:
        boxes.append(_postgres_box(readings))
    return SystemMap([box.fitted() for box in boxes], arrows)


def as_text(system_map: SystemMap) -> list[str]:
    """The map in words, one line a box: for screen readers, and for tests to read."""
    return [f"{box.title} ({box.state}): " + "; ".join(line.text for line in box.lines) for box in system_map.boxes]


def to_json(system_map: SystemMap) -> dict[str, Any]:
    return {
        "boxes": [
            {
                "id": b.id,
                "kind": b.kind,
                "title": b.title,
                "state": b.state,
                "process": b.process,
                "lines": [line.text for line in b.lines],
            }
            for b in system_map.boxes
        ],
        "arrows": [{"points": a.points, "label": a.label} for a in system_map.arrows],
    }
