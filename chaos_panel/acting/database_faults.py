"""The panel's hands on the PostgreSQL pair: its control endpoint (POSTGRES_CONTROL_URL), which the
native launcher runs beside the two nodes with POSTGRES=ha. With one server, or under
docker-compose, there is none, and the panel says so."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx

from chaos_panel.acting.control_endpoints import ControlError, call

SERVICE = "the PostgreSQL pair's control endpoint"
NOT_AVAILABLE = (
    "a failover needs a primary and a standby run by the native launcher: `make up POSTGRES=ha`; "
    "with docker-compose, stop the postgres container and promote postgres-standby by hand "
    "(docs/postgres-failover.md)"
)
FAILOVER_SECONDS = 180
"""A failover waits for the old primary's rebuild as the new standby (a base backup)."""


class DatabaseFaults:
    def __init__(self, url: str, timeout: float = 20) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client(timeout=timeout)

    @property
    def available(self) -> bool:
        return bool(self.url)

    def nodes(self) -> dict[str, Any]:
        """Each node with its role and replication, the mode and the failovers; {"error": …} when unknown."""
        if not self.available:
            return {"nodes": [], "failovers": [], "error": NOT_AVAILABLE}
        try:
            return dict(call(self._client, "GET", SERVICE, f"{self.url}/nodes"))
        except ControlError as error:
            return {"nodes": [], "failovers": [], "error": str(error)}

    def lossy_failovers(self) -> list[float]:
        """When the pair failed over to an asynchronous standby (epoch seconds): the failovers that
        may have taken back acknowledged work. Empty without a pair."""
        found = self.nodes().get("failovers", []) if self.available else []
        return [datetime.fromisoformat(f["at"]).timestamp() for f in found if not f.get("synchronous", True)]

    def failover(self) -> str:
        return self._act("/failover", {}, FAILOVER_SECONDS)

    def detach_standby(self) -> str:
        return self._act("/detach-standby", {})

    def attach_standby(self) -> str:
        return self._act("/attach-standby", {})

    def set_synchronous(self, on: bool) -> str:
        return self._act("/sync", {"on": on})

    def _act(self, path: str, body: dict[str, Any], timeout: float | None = None) -> str:
        if not self.available:
            raise ControlError(NOT_AVAILABLE, 409)
        return str(call(self._client, "POST", SERVICE, f"{self.url}{path}", timeout, json=body)["fault"])

    def close(self) -> None:
        self._client.close()
