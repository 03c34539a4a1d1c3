"""Predict, then break: the panel runs a workshop lab for a learner who first said what the
auditor would find (lost, doubled, or neither), then shows the auditor's answer beside the
prediction. Every run on this system is kept for the instructor's page.

A lab runs exactly as `make lab NAME=…` runs it: in a thread of its own, through the panel's own
HTTP API (labs/client.py), so it can do nothing a learner's clicks could not.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from chaos_panel.acting.control_endpoints import ControlError
from labs.catalog import BY_NAME
from labs.client import LabError, PanelClient
from labs.lab import run

ANSWERS = ("lost", "doubled", "neither")
DOUBLED = ("decides once per order", "at most one charge per order", "at most one email per order")
LOST = ("every event reaches its effect", "no saga stuck", "every outbox row is published")
STUCK_AFTER = 5.0
"""Seconds after which the auditor takes an unfinished order as stuck, when it answers for a lab:
a lab's order is finished or lost by the time the lab ends."""


def answer_of(anomalies: list[dict[str, str]]) -> str:
    """What the auditor's anomalies of one order say, in the learner's words: doubled when any
    effect happened twice, lost when a message or its effect went missing, else neither."""
    invariants = [str(a.get("invariant", "")) for a in anomalies]
    evidence = " ".join(str(a.get("evidence", "")) for a in anomalies)
    if any(name in invariant for invariant in invariants for name in DOUBLED):
        return "doubled"
    if any(name in invariant for invariant in invariants for name in LOST) or "effect missing" in evidence:
        return "lost"
    return "neither"


@dataclass
class LabRun:
    id: int
    lab: str
    prediction: str
    started: float = field(default_factory=time.time)
    lines: list[str] = field(default_factory=list)
    finished: float | None = None
    passed: bool | None = None
    answer: str = ""
    """The auditor's answer for the lab's order, once the lab ended."""
    order_id: str = ""
    look: str = "/"

    @property
    def clock(self) -> str:
        return datetime.fromtimestamp(self.started, UTC).strftime("%H:%M:%S")

    @property
    def title(self) -> str:
        return BY_NAME[self.lab].title

    @property
    def expected(self) -> str:
        return BY_NAME[self.lab].expect

    @property
    def right(self) -> bool | None:
        return None if not self.answer else self.answer == self.prediction


class LabRuns:
    """Every lab run on this system. A run changes in its lab's thread; a reader gets a copy taken
    under the lock, so a page drawn from it is of one moment (an answer never beside a verdict of
    an earlier one, a finished run always with its answer)."""

    def __init__(self, client: Callable[[], PanelClient]) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._runs: list[LabRun] = []

    def all(self) -> list[LabRun]:
        """A copy of every run, the first first."""
        with self._lock:
            return [_copy(r) for r in self._runs]

    def running(self) -> LabRun | None:
        with self._lock:
            return next((_copy(r) for r in self._runs if r.finished is None), None)

    def get(self, run_id: int) -> LabRun | None:
        with self._lock:
            return next((_copy(r) for r in self._runs if r.id == run_id), None)

    def start(self, name: str, prediction: str) -> LabRun:
        """Run lab `name` after the learner predicted `prediction`; one lab at a time."""
        if name not in BY_NAME:
            raise ControlError(f"no lab called {name!r} (known: {', '.join(BY_NAME)})", 400)
        if prediction not in ANSWERS:
            raise ControlError(f"a prediction is one of {', '.join(ANSWERS)}", 400)
        with self._lock:
            busy = next((r for r in self._runs if r.finished is None), None)
            if busy is not None:
                raise ControlError(f"lab {busy.lab} is running: wait for its answer first", 409)
            started = LabRun(len(self._runs) + 1, name, prediction)
            self._runs.append(started)
            first = _copy(started)
        threading.Thread(target=self._run, args=(started,), name=f"lab-{name}", daemon=True).start()
        return first

    def _say(self, lab_run: LabRun, line: str) -> None:
        with self._lock:
            lab_run.lines.append(line)

    def _run(self, lab_run: LabRun) -> None:
        client = self._client()
        passed, order_id, look, answer = lab_run.passed, lab_run.order_id, lab_run.look, lab_run.answer
        try:
            result = run(BY_NAME[lab_run.lab], client, say=lambda line: self._say(lab_run, line))
            passed, order_id, look = result.passed, result.order_id, result.look
            if order_id:
                answer = answer_of(client.anomalies(order_id, stuck_after=STUCK_AFTER))
            else:
                self._say(lab_run, "  the lab placed no order, so the auditor has nothing to answer")
        except LabError as error:
            passed = False
            self._say(lab_run, f"  ✗ {error}")
        finally:
            client.close()
            with self._lock:  # the verdict, the answer and the end, seen together
                lab_run.passed, lab_run.order_id, lab_run.look, lab_run.answer = passed, order_id, look, answer
                lab_run.finished = time.time()


def _copy(lab_run: LabRun) -> LabRun:
    return replace(lab_run, lines=list(lab_run.lines))
