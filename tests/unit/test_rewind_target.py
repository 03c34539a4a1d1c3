"""Where a rewind moves a partition: back to the time, never past where the member stands."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectively_once.lab.rewind_target import BEGINNING, rewind_target

pytestmark = pytest.mark.unit

offsets = st.integers(min_value=0, max_value=10**12)
at_times = st.one_of(st.none(), offsets, st.integers(min_value=-2, max_value=-1))
standings = st.one_of(st.none(), offsets, st.just(-1001))


@given(at_times, standings)
def test_a_rewind_never_moves_a_member_past_where_it_stands(at_time: int | None, stands_at: int | None) -> None:
    """Whatever the time finds, nothing the member has not reached is skipped: the target is the
    beginning or at most where it stands, and never a logical end resolved later."""
    target = rewind_target(at_time, stands_at)
    assert target == BEGINNING or (stands_at is not None and 0 <= target <= stands_at)


@given(offsets, offsets)
def test_a_rewind_goes_back_to_the_time_when_the_member_is_past_it(at_time: int, ahead: int) -> None:
    assert rewind_target(at_time, at_time + ahead) == at_time


@given(offsets)
def test_with_nothing_at_the_time_the_member_stays_where_it_stands(stands_at: int) -> None:
    assert rewind_target(-1, stands_at) == stands_at


@given(at_times)
def test_a_member_that_stands_nowhere_starts_from_the_beginning(at_time: int | None) -> None:
    """No position and no committed offset: it would start from the first message anyway."""
    assert rewind_target(at_time, None) == BEGINNING
    assert rewind_target(None, 5) == BEGINNING
