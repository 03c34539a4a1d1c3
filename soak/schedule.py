"""The chaos schedule: what the soak breaks, in which order. Pure: it takes what the running
processes report and returns the plan; soak/run.py carries it out."""

from __future__ import annotations

import random
from collections.abc import Collection
from dataclasses import dataclass
from itertools import zip_longest

PROCESS_CRASH = "crash"
REWIND = "rewind"
REPUBLISH = "republish"
BROKER_RESTART = "kafka restart"
DATABASE_RESTART = "postgres restart"
DATABASE_FAILOVER = "postgres failover"
"""POSTGRES=ha: the primary SIGKILLed, the standby promoted, the old primary rebuilt as its standby."""
PROVIDER_TIMEOUT = "provider timeout after charging"
LEADER_KILL = "leader kill"
BROKER_FREEZE = "broker freeze"
CONTROLLER_RESTART = "controller restart"
CONNECT_KILL = "connect kill"
"""RELAY=debezium: Kafka Connect's worker SIGKILLed; it resumes from its last flushed offset."""
LOCK_EXPIRY = "lock expiry"
"""SHARE_GROUPS=on: a share member stalled before its claim past its record's lock, so that another
member gets the record meanwhile (a share group's redelivery, in place of a rewind it does not offer)."""

KINDS = (
    PROCESS_CRASH,
    REWIND,
    REPUBLISH,
    BROKER_RESTART,
    DATABASE_RESTART,
    DATABASE_FAILOVER,
    PROVIDER_TIMEOUT,
    LEADER_KILL,
    BROKER_FREEZE,
    CONTROLLER_RESTART,
    CONNECT_KILL,
    LOCK_EXPIRY,
)
CLUSTER_FAULTS = (LEADER_KILL, BROKER_FREEZE, CONTROLLER_RESTART)
"""What a replicated cluster (BROKERS=3) is put through in place of the one broker's restart."""

LEADER_KILL_TARGETS = ("orders.events/0", "inventory.events/1", "payment.events/2", "orders.events/1")
"""Partitions whose leader is killed, in turn: each of the saga's event topics, from the middle
of the flow."""
FREEZE_SECONDS = 15.0


@dataclass(frozen=True)
class Step:
    kind: str
    target: str = ""
    """The process (crash, rewind), the partition `topic/n` (leader kill, freeze) or nothing."""
    point: str = ""
    seconds: float = 0.0
    """How long a broker stays frozen."""

    def describe(self) -> str:
        if self.kind == PROCESS_CRASH:
            return f"crash {self.target} at {self.point}"
        if self.kind == REWIND:
            return f"rewind {self.target} a minute back"
        if self.kind == LOCK_EXPIRY:
            return f"hold a record of {self.target} past its lock"
        if self.kind == LEADER_KILL:
            return f"kill the leader of {self.target}"
        if self.kind == BROKER_FREEZE:
            return f"freeze the leader of {self.target} for {self.seconds:g} s"
        return self.kind


TEACHING_ONLY_POINTS = ("after_check", "between_transactions")
"""Points the correct strategy never passes: arming them would crash nothing."""


def plan(
    points: dict[str, list[str]],
    consumers: list[str],
    infrastructure_restarts: bool,
    brokers: int = 1,
    leader_kills: int = 2,
    crashes: int = 0,
    seed: int | None = None,
    connect_kills: int = 0,
    failovers: int = 0,
    share_consumers: Collection[str] = (),
) -> list[Step]:
    """Every process crashed at every point it passes, every consumer rewound, duplicates republished,
    the broker and the database restarted, the provider timing out after charging, interleaved so
    that any prefix of the plan mixes every kind. With a replicated cluster (`brokers` > 1) the
    broker restart becomes `leader_kills` leader kills, a freeze and a controller restart.

    `crashes` asks for at least that many crash steps: passes over every point follow one another
    until there are enough (each pass covers every point). With a `seed`, each pass visits the
    points in an order drawn from it: the same seed, the same plan. `connect_kills`: SIGKILLs of
    Kafka Connect's worker, where Debezium relays (RELAY=debezium). `failovers`: with a PostgreSQL
    pair (POSTGRES=ha), that many failovers in place of the database's restart. `share_consumers`:
    the consumers that run as share groups, whose rewind becomes a lock that expires."""
    chooser = random.Random(seed)
    every_point = [
        Step(PROCESS_CRASH, process, point)
        for process, names in sorted(points.items())
        for point in names
        if point not in TEACHING_ONLY_POINTS
    ]
    crash_steps: list[Step] = []
    while every_point and (not crash_steps or len(crash_steps) < crashes):
        one_pass = list(every_point)
        if seed is not None:
            chooser.shuffle(one_pass)
        crash_steps += one_pass
    rewinds = [Step(LOCK_EXPIRY if c in share_consumers else REWIND, c) for c in sorted(consumers)]
    others = [Step(REPUBLISH), Step(PROVIDER_TIMEOUT), Step(REPUBLISH)]
    if infrastructure_restarts and brokers > 1:
        kills = [Step(LEADER_KILL, LEADER_KILL_TARGETS[n % len(LEADER_KILL_TARGETS)]) for n in range(leader_kills)]
        others[1:1] = kills[:1]
        others.append(Step(BROKER_FREEZE, "inventory.events/0", seconds=FREEZE_SECONDS))
        others += kills[1:]
        others.append(Step(CONTROLLER_RESTART))
    elif infrastructure_restarts:
        others[1:1] = [Step(BROKER_RESTART)]
    if infrastructure_restarts and failovers:  # the first early, the others spread to the end
        for n in range(failovers):
            others.insert(min(len(others), 1 + n * (len(others) // failovers + 1)), Step(DATABASE_FAILOVER))
    elif infrastructure_restarts:
        others.append(Step(DATABASE_RESTART))
    for n in range(connect_kills):  # the first early, the next ones spread among the rest
        others.insert(min(len(others), 1 + 3 * n), Step(CONNECT_KILL))
    lanes = [crash_steps, rewinds, others]
    steps: list[Step] = []
    # Crashes are most of the plan; the other kinds are spread through it.
    stride = max(1, len(crash_steps) // max(1, len(rewinds) + len(others)))
    extra = [step for pair in zip_longest(rewinds, others) for step in pair if step is not None]
    for index, crash in enumerate(crash_steps):
        steps.append(crash)
        if index % stride == stride - 1 and extra:
            steps.append(extra.pop(0))
    steps.extend(extra)
    assert len(steps) == sum(len(lane) for lane in lanes)
    return steps
