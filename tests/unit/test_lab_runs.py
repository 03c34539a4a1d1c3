"""Predict, then break: the auditor's anomalies read as lost, doubled or neither; one lab at a
time, a prediction among the three, and each run kept with its answer beside the prediction."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from chaos_panel.acting.control_endpoints import ControlError
from chaos_panel.acting.lab_runs import ANSWERS, LabRuns, answer_of
from labs.catalog import LABS
from tests.support.waiting import wait_for


@pytest.mark.parametrize(
    ("anomalies", "answer"),
    [
        ([], "neither"),
        ([{"invariant": "inventory decides once per order", "evidence": "2 InventoryReserved"}], "doubled"),
        ([{"invariant": "at most one charge per order", "evidence": "2 charges"}], "doubled"),
        ([{"invariant": "no saga stuck", "evidence": "still PLACED after 0:00:05"}], "lost"),
        (
            [{"invariant": "x: every marker has its effect", "evidence": "marker committed, business effect missing"}],
            "lost",
        ),
        ([{"invariant": "x: every event reaches its effect", "evidence": "older than"}], "lost"),
        (
            [
                {"invariant": "no saga stuck", "evidence": "…"},
                {"invariant": "payment decides once per order", "evidence": ""},
            ],
            "doubled",
        ),
    ],
)
def test_the_auditors_anomalies_read_in_the_learners_words(anomalies: list[dict[str, str]], answer: str) -> None:
    assert answer_of(anomalies) == answer


def test_every_lab_expects_one_of_the_answers_and_the_teaching_labs_expect_an_anomaly() -> None:
    assert {lab.expect for lab in LABS} <= set(ANSWERS)
    assert {lab.name for lab in LABS if lab.expect != "neither"} == {
        "check-then-act",
        "marker-before",
        "marker-after",
        "ack-before-commit",
        "memory-dedup",
        "message-id-only",
        "failover",  # an asynchronous standby, the mistake it teaches: acknowledged work lost
    }


class _Panel:
    """A stand-in panel client that a lab cannot get past: its first request blocks until released."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release
        self.url = "http://panel"

    def relay(self) -> str:
        self.release.wait(10)
        return "builtin"

    def act(self, *_: Any, **__: Any) -> dict[str, Any]:
        from labs.client import LabError

        raise LabError("the stand-in refuses")

    def close(self) -> None:
        pass


def test_one_lab_at_a_time_a_known_prediction_and_the_run_kept_with_what_it_said() -> None:
    release = threading.Event()
    runs = LabRuns(lambda: _Panel(release))  # type: ignore[arg-type, return-value]
    with pytest.raises(ControlError, match="a prediction is one of") as bad:
        runs.start("crash-after-commit", "maybe")
    with pytest.raises(ControlError, match="no lab called") as unknown:
        runs.start("no-such-lab", "lost")
    assert bad.value.status == unknown.value.status == 400
    first = runs.start("crash-after-commit", "doubled")
    with pytest.raises(ControlError, match="is running") as busy:
        runs.start("relay-crash", "neither")
    assert busy.value.status == 409
    release.set()
    wait_for(lambda: _ended(runs, first.id), 10, "the first lab run to end")
    ended = runs.get(first.id)
    assert ended is not None and ended.passed is False and ended.answer == "" and ended.right is None
    assert any("the stand-in refuses" in line for line in ended.lines), ended.lines
    assert runs.start("relay-crash", "neither").id == 2


def _ended(runs: LabRuns, run_id: int) -> bool:
    found = runs.get(run_id)
    return found is not None and found.finished is not None


def test_a_run_read_while_its_lab_ends_is_of_one_moment() -> None:
    """A page is drawn from what `get` gave: a copy, which the lab's thread does not change under
    it. The live run read twice could show the auditor's answer beside an unset verdict."""
    release = threading.Event()
    runs = LabRuns(lambda: _Panel(release))  # type: ignore[arg-type, return-value]
    started = runs.start("crash-after-commit", "doubled")
    before = runs.get(started.id)
    assert before is not None and before.finished is None
    lines_before = list(before.lines)
    release.set()
    wait_for(lambda: _ended(runs, started.id), 10, "the lab run to end")
    assert (before.finished, before.passed, before.lines) == (None, None, lines_before)
    assert started.finished is None and started.passed is None
    after = runs.get(started.id)
    assert after is not None and after.finished is not None and after.passed is False
    assert any("the stand-in refuses" in line for line in after.lines), after.lines
    assert len(after.lines) > len(lines_before)
    assert [r.finished is not None for r in runs.all()] == [True]
