"""The safe horizon's arithmetic: the longest redelivery window bounds the retention."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectively_once.safe_horizon import Window, duration, verdict

seconds = st.floats(min_value=0, max_value=10 * 365 * 86400, allow_nan=False)
windows = st.lists(
    st.builds(Window, st.sampled_from(["topic retention", "oldest dead letter", "keys"]), seconds | st.none()),
    max_size=6,
)


@given(windows, st.floats(min_value=1, max_value=20 * 365 * 86400, allow_nan=False))
def test_a_retention_is_safe_exactly_when_it_covers_every_window(
    given_windows: list[Window], configured: float
) -> None:
    judged = verdict(timedelta(seconds=configured), given_windows)
    covers_all = all(
        w.seconds is not None and timedelta(seconds=configured).total_seconds() >= w.seconds for w in given_windows
    )
    assert judged.safe == covers_all
    if judged.bound_by is not None:
        assert judged.bound_by in given_windows
        assert judged.reason().count(judged.bound_by.source) >= 1


@given(windows)
def test_an_unlimited_window_leaves_no_finite_retention_safe(given_windows: list[Window]) -> None:
    judged = verdict(timedelta(days=36500), [*given_windows, Window("topic retention", None, "kept for ever")])
    assert judged.shortest_safe_seconds is None and not judged.safe
    assert "no limit" in judged.reason()


def test_no_window_means_any_positive_retention_is_safe() -> None:
    judged = verdict(timedelta(seconds=1), [])
    assert judged.safe and judged.shortest_safe_seconds == 0 and judged.bound_by is None


@pytest.mark.parametrize("configured", [timedelta(0), timedelta(seconds=-5)])
def test_a_retention_that_is_not_positive_is_refused(configured: timedelta) -> None:
    with pytest.raises(ValueError, match="positive"):
        verdict(configured, [])


def test_a_negative_window_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        verdict(timedelta(days=1), [Window("x", -1.0)])


def test_durations_read_as_people_read_them() -> None:
    assert [duration(s) for s in (45, 720, 6 * 3600, 7 * 86400)] == ["45 s", "12 min", "6.0 h", "7.0 d"]
