from __future__ import annotations

from effectively_once.cached_reading import CachedReading


def test_a_reading_is_taken_once_per_period_and_a_failed_one_keeps_the_last() -> None:
    answers = iter([1, None, 3])
    calls: list[int] = []

    def read() -> int | None:
        calls.append(1)
        return next(answers)

    every_time = CachedReading(read, every_seconds=0)
    assert [every_time.value(), every_time.value(), every_time.value()] == [1, 1, 3]
    rarely = CachedReading(lambda: len(calls), every_seconds=3600)
    assert rarely.value() == rarely.value() == 3
