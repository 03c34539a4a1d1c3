"""What a lab is, and the session one runs in: steps told as they happen, claims checked."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from labs.client import Entry, LabError, PanelClient


@dataclass(frozen=True)
class Check:
    claim: str
    passed: bool
    evidence: str


@dataclass
class Session:
    """One lab's run: the panel, what it printed, what it checked, and the page to look at."""

    panel: PanelClient
    say: Callable[[str], None] = print
    checks: list[Check] = field(default_factory=list)
    look: str = "/"
    """The panel page that shows the outcome (the browser tests screenshot it)."""
    order_id: str = ""

    def step(self, text: str) -> None:
        self.say(f"  → {text}")

    def check(self, claim: str, passed: bool, evidence: str = "") -> bool:
        self.checks.append(Check(claim, passed, evidence))
        self.say(f"  {'✓' if passed else '✗'} {claim}" + (f"  [{evidence}]" if evidence else ""))
        return passed

    def fail(self, claim: str, error: LabError) -> None:
        self.check(claim, False, str(error))

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(check.passed for check in self.checks)


@dataclass(frozen=True)
class Lab:
    number: int
    name: str
    title: str
    run: Callable[[Session], None]
    proven_by: tuple[str, ...]
    """The tests that prove the behaviour this lab shows (beside this lab's own run)."""
    relay: str = "builtin"
    """The relay the system must run (`make up RELAY=…`): the lab refuses to start on the other."""
    postgres: str = "single"
    """`ha` when the lab needs a primary and a standby (`make up POSTGRES=ha`); the others run on either."""
    share_groups: bool = False
    """True when the lab needs the share groups (`make up SHARE_GROUPS=on`); the others are run
    without them."""
    expect: str = "neither"
    """What the auditor says of the lab's order once it has run: neither (nothing lost or doubled),
    lost, or doubled. The panel's predict-then-break mode asks the learner for it first."""

    @property
    def doc(self) -> str:
        return f"docs/workshop/{self.number:02d}-{self.name}.md"

    @property
    def system(self) -> str:
        """The variables of `make up` this lab needs, beside the defaults: `RELAY=… POSTGRES=…`."""
        return (
            f"RELAY={self.relay}"
            + (" POSTGRES=ha" if self.postgres == "ha" else "")
            + (" SHARE_GROUPS=on" if self.share_groups else "")
        )

    @property
    def start(self) -> str:
        """The command that starts a system this lab runs on."""
        if self.system == "RELAY=builtin":
            return "make up"
        return f"make down && make up {self.system.removeprefix('RELAY=builtin').strip()}"

    @property
    def screenshot(self) -> str:
        return f"docs/workshop/images/{self.number:02d}-{self.name}.png"


@dataclass(frozen=True)
class Result:
    lab: Lab
    passed: bool
    checks: list[Check]
    look: str
    order_id: str
    seconds: float


def run(lab: Lab, panel: PanelClient, say: Callable[[str], None] = print) -> Result:
    """Reset every fault, wait for quiet, run the lab, reset again; never raises for the lab."""
    session = Session(panel, say)
    started = time.monotonic()
    say(f"Lab {lab.number:02d} · {lab.title}")
    try:
        running = panel.relay()
        if running != lab.relay:
            raise LabError(f"this lab needs RELAY={lab.relay}, and this system runs RELAY={running}: {lab.start}")
        if lab.postgres == "ha":
            try:
                panel.databases()
            except LabError as error:
                raise LabError(f"this lab needs a primary and a standby ({error}): {lab.start}") from None
        if lab.share_groups and not panel.share_groups()[0]:
            raise LabError(f"this lab needs the share groups, and this system runs without them: {lab.start}")
        panel.act("reset")
        panel.wait_quiet()
        lab.run(session)
    except LabError as error:
        session.fail("the lab ran to its end", error)
    finally:
        try:
            panel.act("reset")
        except LabError as error:
            session.fail("the panel reset every fault afterwards", error)
    seconds = time.monotonic() - started
    say(f"  {'PASSED' if session.passed else 'FAILED'} in {seconds:.1f} s; look at {panel.url}{session.look}")
    return Result(lab, session.passed, session.checks, session.look, session.order_id, seconds)


# Timeline helpers used by the scenarios ---------------------------------------------------------


def delivered(consumer: str, event_type: str, outcome: str) -> Callable[[Entry], bool]:
    return lambda e: e["actor"] == consumer and e["kind"] == outcome and str(e["text"]).startswith(f"{event_type}:")


def fault(process: str, point: str) -> Callable[[Entry], bool]:
    return lambda e: e["kind"] == "fault" and e["actor"] == process and point in str(e["text"])


def described(anomalies: list[dict[str, str]]) -> str:
    """Anomalies as evidence: none, or the first with how many more."""
    if not anomalies:
        return "no anomaly"
    first = anomalies[0]
    more = f" (+{len(anomalies) - 1} more)" if len(anomalies) > 1 else ""
    return f"{first['invariant']}: {first['evidence']}{more}"


def count(entries: list[Entry], matches: Callable[[Entry], bool]) -> int:
    return sum(1 for entry in entries if matches(entry))
