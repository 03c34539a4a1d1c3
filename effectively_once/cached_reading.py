"""A reading taken at most every so often, for collectors that query a database when scraped."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class CachedReading(Generic[T]):
    """`read()` runs at most every `every_seconds`; in between, and when it fails (returns None),
    the last value stands."""

    def __init__(self, read: Callable[[], T | None], every_seconds: float) -> None:
        self._read = read
        self._every = every_seconds
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._value: T | None = None

    def value(self) -> T | None:
        with self._lock:
            if self._read_at is None or time.monotonic() - self._read_at >= self._every:
                self._read_at = time.monotonic()
                fresh = self._read()
                if fresh is not None:
                    self._value = fresh
            return self._value
