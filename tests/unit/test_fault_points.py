from __future__ import annotations

import threading

import pytest
from psycopg import errors

from effectively_once.faults import CRASH_EXIT_CODE, FaultAction, FaultPoints, InjectedFault


class Exited(Exception):
    pass


def _exit(code: int) -> None:
    raise Exited(code)


def test_an_unarmed_point_does_nothing() -> None:
    faults = FaultPoints(exit=_exit)
    faults.hit("after_claim")
    assert faults.fired == {}


def test_a_point_armed_once_fires_once() -> None:
    faults = FaultPoints(exit=_exit)
    faults.arm("before_commit", FaultAction.RAISE)
    with pytest.raises(InjectedFault):
        faults.hit("before_commit")
    faults.hit("before_commit")
    assert faults.fired == {"before_commit": 1}


def test_a_crash_exits_with_the_crash_status() -> None:
    faults = FaultPoints(exit=_exit)
    faults.arm("after_commit_before_ack", FaultAction.CRASH)
    with pytest.raises(Exited) as exited:
        faults.hit("after_commit_before_ack")
    assert exited.value.args == (CRASH_EXIT_CODE,)


def test_n_times_and_always() -> None:
    faults = FaultPoints(exit=_exit)
    calls: list[str] = []
    faults.arm("after_claim", calls.append, times=3)
    faults.arm("before_claim", calls.append, times=None)
    for _ in range(5):
        faults.hit("after_claim")
        faults.hit("before_claim")
    assert calls.count("after_claim") == 3
    assert calls.count("before_claim") == 5


def test_disarm_one_or_all() -> None:
    faults = FaultPoints(exit=_exit)
    faults.arm("a", FaultAction.RAISE, times=None)
    faults.arm("b", FaultAction.RAISE, times=None)
    faults.disarm("a")
    assert set(faults.armed()) == {"b"}
    faults.disarm()
    assert faults.armed() == {}


def test_arming_from_the_environment_spec() -> None:
    faults = FaultPoints(exit=_exit)
    faults.arm_from_spec("after_commit_before_ack=crash, before_commit=raise:3,after_claim=stall:always")
    armed = faults.armed()
    assert armed["after_commit_before_ack"].action is FaultAction.CRASH
    assert armed["before_commit"].remaining == 3
    assert armed["after_claim"].remaining is None


@pytest.mark.parametrize("spec", ["after_claim", "after_claim=explode", "=crash"])
def test_a_bad_spec_is_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="bad fault spec"):
        FaultPoints(exit=_exit).arm_from_spec(spec)


def test_probability_must_be_a_probability() -> None:
    with pytest.raises(ValueError):
        FaultPoints().arm("x", FaultAction.RAISE, probability=0)


def test_a_serialization_failure_raises_postgres_40001() -> None:
    faults = FaultPoints()
    faults.arm("before_commit", FaultAction.SERIALIZATION_FAILURE, times=1)
    with pytest.raises(errors.SerializationFailure):
        faults.hit("before_commit")
    faults.hit("before_commit")  # once only


def test_the_listener_hears_each_firing_with_the_thread_s_context_before_a_crash() -> None:
    exits: list[int] = []
    heard: list[tuple[str, str, dict[str, object]]] = []
    faults = FaultPoints(exit=exits.append)
    faults.on_fire = lambda point, action, context: heard.append((point, action, dict(context)))
    faults.context = {"keys": ["order-1"]}
    faults.arm("after_commit_before_ack", FaultAction.CRASH)
    faults.hit("after_commit_before_ack")
    assert heard == [("after_commit_before_ack", "crash", {"keys": ["order-1"]})] and exits == [75]
    other_thread: list[dict[str, object]] = []
    thread = threading.Thread(target=lambda: other_thread.append(faults.context))
    thread.start()
    thread.join()
    assert other_thread == [{}]
