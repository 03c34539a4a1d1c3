"""Transient or permanent: the classification every executor uses, and the retry policy."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import httpx
from hypothesis import given
from hypothesis import strategies as st

from effectively_once.remote_call import TRANSIENT_STATUSES, Kind, RetryPolicy, classify_status, of_error, of_response


@given(st.integers(100, 599))
def test_every_status_is_done_transient_or_permanent_by_one_rule(status: int) -> None:
    kind = classify_status(status)
    if 200 <= status < 300:
        assert kind is Kind.DONE
    elif status >= 500 or status in (408, 409, 425, 429):
        assert kind is Kind.TRANSIENT
    else:
        assert kind is Kind.PERMANENT


def test_the_not_now_statuses_are_exactly_the_four() -> None:
    assert frozenset({408, 409, 425, 429}) == TRANSIENT_STATUSES
    assert classify_status(422) is classify_status(400) is classify_status(402) is Kind.PERMANENT


@given(st.sampled_from([httpx.ReadTimeout("slow"), httpx.ConnectError("refused"), httpx.RemoteProtocolError("cut")]))
def test_no_answer_at_all_is_transient(error: httpx.HTTPError) -> None:
    assert of_error(error).kind is Kind.TRANSIENT and of_error(error).status is None


def test_a_refusal_carries_what_the_other_side_said() -> None:
    response = httpx.Response(422, json={"error": "recipient ada@example.com refused"})
    result = of_response(response)
    assert result.kind is Kind.PERMANENT and result.reason == "HTTP 422 (recipient ada@example.com refused)"
    nested = of_response(httpx.Response(400, json={"error": {"type": "x", "message": "no such card"}}))
    assert nested.reason == "HTTP 400 (no such card)"
    assert of_response(httpx.Response(503, text="<html>")).reason == "HTTP 503"


@given(st.integers(1, 60), st.floats(0.01, 5), st.floats(0.1, 120), st.integers(0, 2**32))
def test_a_delay_is_jittered_within_half_and_all_of_the_capped_exponential(
    failures: int, first: float, cap: float, seed: int
) -> None:
    policy = RetryPolicy(first_delay_seconds=first, max_delay_seconds=cap)
    ceiling = min(cap, first * 2 ** (failures - 1))
    assert ceiling / 2 <= policy.delay(failures, random.Random(seed)) <= ceiling


@given(st.floats(0, 10_000), st.floats(0.001, 10_000))
def test_work_gives_up_exactly_at_the_maximum_age(age: float, max_age: float) -> None:
    now = datetime(2026, 12, 2, tzinfo=UTC)
    assert RetryPolicy(max_age_seconds=max_age).gives_up(now - timedelta(seconds=age), now) == (
        timedelta(seconds=age) >= timedelta(seconds=max_age)
    )
