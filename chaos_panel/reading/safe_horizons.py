"""The panel's view of each consumer's safe horizon (services/safe_horizons.py), read at most every
10 s: weighing it opens Kafka clients, and the chaos page polls it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta

from effectively_once.cached_reading import CachedReading
from services.safe_horizons import ConsumerHorizon, weigh_all


class SafeHorizons:
    def __init__(
        self,
        bootstrap_servers: str,
        retentions: Callable[[], Mapping[str, timedelta]],
        every_seconds: float = 10,
    ) -> None:
        self._servers = bootstrap_servers
        self._retentions = retentions
        self._reading = CachedReading(self._read, every_seconds)

    def _read(self) -> list[ConsumerHorizon]:
        return weigh_all(self._servers, self._retentions())

    def current(self) -> list[ConsumerHorizon]:
        return self._reading.value() or []
