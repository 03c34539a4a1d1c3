"""Named fault points: places in the code where a control plane can make the process really
crash, raise or stall, to show what each step protects.

Unarmed, a point costs one dictionary check. A stall lasts its seconds or until the points are
disarmed (DELETE /faults), so a test holds a transaction open exactly as long as it needs. Armed
points live in the process's memory: a crash forgets them, so "crash once" means once, and the
supervisor's restart runs clean.
"""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from prometheus_client import Counter
from psycopg import errors

log = logging.getLogger(__name__)

CRASH_EXIT_CODE = 75
"""The exit status of an injected crash, so logs and tests can tell it from other deaths."""

RUNTIME_POINTS = (
    "before_claim",
    "after_claim",
    "before_commit",
    "after_commit_before_ack",
    "after_check",
    "between_transactions",
)
"""The points the consumer runtime passes through (the last two only under teaching strategies)."""


FAULTS_FIRED = Counter("eo_faults_fired", "Injected faults that fired, by fault point.", ["point"])
"""A crash's own increment dies with the process: the restart (process_start_time_seconds) tells it."""


class FaultAction(StrEnum):
    CRASH = "crash"
    RAISE = "raise"
    STALL = "stall"
    SERIALIZATION_FAILURE = "serialization_failure"
    """Raise PostgreSQL's 40001, as a concurrent transaction would: the whole transaction is retried."""


class InjectedFault(RuntimeError):
    """Raised at an armed point whose action is `raise`."""


@dataclass
class Arming:
    action: FaultAction | Callable[[str], object]
    remaining: int | None = 1
    """How many more times it fires; None: every time."""
    probability: float = 1.0
    stall_seconds: float = 5.0


FireListener = Callable[[str, str, dict[str, object]], None]
"""Told (point, action, context) just before an armed point fires; a crash waits for it."""


class FaultPoints:
    """The armed fault points of one process."""

    def __init__(self, exit: Callable[[int], None] = os._exit) -> None:
        self._armed: dict[str, Arming] = {}
        self._lock = threading.Lock()
        self._exit = exit
        self._local = threading.local()
        self.fired: dict[str, int] = {}
        self._release = threading.Event()
        """Set by `disarm`: a stall in progress ends early."""
        self.on_fire: FireListener = lambda point, action, context: None

    @property
    def context(self) -> dict[str, object]:
        """What this thread is working on (message ids, order keys), reported when a point fires."""
        context: dict[str, object] | None = getattr(self._local, "context", None)
        return context if context is not None else {}

    @context.setter
    def context(self, value: dict[str, object]) -> None:
        self._local.context = value

    def arm(
        self,
        point: str,
        action: FaultAction | Callable[[str], object],
        times: int | None = 1,
        probability: float = 1.0,
        stall_seconds: float = 5.0,
    ) -> None:
        """Arm `point`: fire `times` times (None: always), each with `probability`."""
        if not 0 < probability <= 1:
            raise ValueError("probability must be in (0, 1]")
        with self._lock:
            self._armed[point] = Arming(action, times, probability, stall_seconds)

    def disarm(self, point: str | None = None) -> None:
        """Disarm one point, or every point; either way, stalls in progress end now."""
        with self._lock:
            if point is None:
                self._armed.clear()
            else:
                self._armed.pop(point, None)
            self._release.set()
            self._release = threading.Event()

    def armed(self) -> dict[str, Arming]:
        with self._lock:
            return dict(self._armed)

    def hit(self, point: str) -> None:
        """Pass through `point`: nothing happens unless it is armed."""
        if not self._armed:
            return
        with self._lock:
            arming = self._armed.get(point)
            if arming is None or random.random() >= arming.probability:
                return
            if arming.remaining is not None:
                arming.remaining -= 1
                if arming.remaining <= 0:
                    del self._armed[point]
            self.fired[point] = self.fired.get(point, 0) + 1
            FAULTS_FIRED.labels(point).inc()
            release = self._release
        self._fire(point, arming, release)

    def _fire(self, point: str, arming: Arming, release: threading.Event) -> None:
        if callable(arming.action) and not isinstance(arming.action, FaultAction):
            arming.action(point)
            return
        try:
            self.on_fire(point, str(arming.action), self.context)
        except Exception:  # telemetry must never change what the fault does
            log.exception("fault listener failed")
        if arming.action is FaultAction.CRASH:
            log.critical("fault point %s: crashing the process now", point, extra={"fault_point": point})
            logging.shutdown()
            self._exit(CRASH_EXIT_CODE)
        elif arming.action is FaultAction.RAISE:
            raise InjectedFault(f"injected fault at {point}")
        elif arming.action is FaultAction.SERIALIZATION_FAILURE:
            raise errors.SerializationFailure(f"injected serialization failure at {point}")
        elif arming.action is FaultAction.STALL:
            log.warning("fault point %s: stalling %.1f s", point, arming.stall_seconds, extra={"fault_point": point})
            release.wait(arming.stall_seconds)

    def arm_from_spec(self, spec: str) -> None:
        """Arm points from text such as `after_commit_before_ack=crash,before_commit=raise:3`.

        Each item is `point=action[:times]`; times `always` fires every time. Used by the
        EO_FAULTS environment variable, so a process can start with points armed.
        """
        for item in filter(None, (part.strip() for part in spec.split(","))):
            point, _, rest = item.partition("=")
            action, _, times = rest.partition(":")
            if not point or action not in FaultAction.__members__.values():
                raise ValueError(
                    f"bad fault spec {item!r}: expected point=crash|raise|stall|serialization_failure[:times]"
                )
            count = None if times == "always" else int(times or 1)
            self.arm(point, FaultAction(action), times=count)
