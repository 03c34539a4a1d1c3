"""The shortest safe marker retention, from what could still be delivered again. No I/O here.

A marker must outlive every redelivery of its message. A message can come back from a topic for as
long as the topic keeps it (a rewind), from the consumer's own backlog (the oldest message not yet
acknowledged comes again after a crash), from the dead-letter topic (a re-drive sends the original
again) and through a remote call's retry for as long as the remote side keeps its idempotency key.
Each of those is a window; the shortest safe retention is the longest window. A configured horizon
shorter than that is unsafe: a purge would remove markers whose messages can still come back, and
the consumer would then refuse those messages as beyond the horizon instead of absorbing them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

TOPIC_RETENTION = "topic retention"
OLDEST_UNACKNOWLEDGED = "oldest unacknowledged"
OLDEST_DEAD_LETTER = "oldest dead letter"


class HorizonUnknown(Exception):
    """What could be delivered again could not be read: a purge waits for a reading."""


@dataclass(frozen=True)
class Window:
    """How long after its first delivery a message may still be delivered again, and why."""

    source: str
    """What keeps the message: "topic retention", "oldest unacknowledged", "oldest dead letter", …"""
    seconds: float | None
    """None: no limit (a topic kept for ever can be replayed from its start at any time)."""
    detail: str = ""


@dataclass(frozen=True)
class Verdict:
    configured_seconds: float
    windows: tuple[Window, ...]

    @property
    def bound_by(self) -> Window | None:
        """The longest window: the one the retention must cover (an unlimited one first)."""
        if not self.windows:
            return None
        return max(self.windows, key=lambda window: float("inf") if window.seconds is None else window.seconds)

    @property
    def shortest_safe_seconds(self) -> float | None:
        """The retention every window fits in; None when a window has no limit; 0 when there is none."""
        longest = self.bound_by
        return 0.0 if longest is None else longest.seconds

    @property
    def safe(self) -> bool:
        shortest = self.shortest_safe_seconds
        return shortest is not None and self.configured_seconds >= shortest

    def reason(self) -> str:
        """One sentence: why the configured retention is safe or not."""
        longest, configured = self.bound_by, duration(self.configured_seconds)
        if longest is None:
            return f"nothing can be delivered again; the configured retention ({configured}) is safe"
        what = f"{longest.source}{f' ({longest.detail})' if longest.detail else ''}"
        if longest.seconds is None:
            return f"{what} has no limit: no finite retention ({configured} configured) covers a replay from its start"
        if self.safe:
            return f"the configured retention ({configured}) covers the longest window, {what}: " + duration(
                longest.seconds
            )
        return (
            f"the configured retention ({configured}) is shorter than {what}: {duration(longest.seconds)}; "
            "markers purged now could belong to messages that can still come back"
        )


def verdict(configured: timedelta, windows: Iterable[Window]) -> Verdict:
    if configured.total_seconds() <= 0:
        raise ValueError("the configured retention must be positive")
    windows = tuple(windows)
    for window in windows:
        if window.seconds is not None and window.seconds < 0:
            raise ValueError(f"{window.source}: a window cannot be negative ({window.seconds})")
    return Verdict(configured.total_seconds(), windows)


def describe(judged: Verdict) -> list[str]:
    """Each window on a line of its own (indented), then the verdict: what the horizon command and
    `make horizon` print."""
    lines = []
    for window in judged.windows:
        where = f" ({window.detail})" if window.detail else ""
        length = "no limit" if window.seconds is None else duration(window.seconds)
        lines.append(f"  {window.source + where:<58} {length}")
    lines.append(("safe: " if judged.safe else "UNSAFE: ") + judged.reason())
    return lines


def duration(seconds: float) -> str:
    """A length of time as people read it: 45 s, 12 min, 6.0 h, 7.0 d."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"
