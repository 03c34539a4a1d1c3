"""Where a rewind moves one partition: back, never forward.

A rewind exists to deliver again what a group acknowledged; it must never skip what it has not.
Two ways it could: seeking to the first message at or after the time when the member has not yet
reached that message (it lags behind the time), and seeking to the partition's end when nothing
is at or after the time (the end is resolved only at the next fetch, after messages the member
has not seen may have arrived). So a partition goes to the first message at the time or to where
the member stands, whichever is earlier; with nothing at the time it stays where it stands.
"""

from __future__ import annotations

BEGINNING = -2
"""Kafka's logical offset for a partition's first message (confluent_kafka.OFFSET_BEGINNING)."""


def rewind_target(at_time: int | None, stands_at: int | None) -> int:
    """The offset to seek one partition to.

    `at_time`: the first offset at or after the rewind's time, a negative number when no message
    is, None for a rewind to the beginning. `stands_at`: the offset the member would be given next
    (its position, else its group's committed offset), None when it has neither; everything before
    it was acknowledged.
    """
    if at_time is None or stands_at is None or stands_at < 0:
        return BEGINNING
    if at_time < 0:
        return stands_at
    return min(at_time, stands_at)
