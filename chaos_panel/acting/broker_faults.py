"""The panel's hands on the Kafka nodes: the nodes' control endpoint (BROKER_CONTROL_URL), which
the native launcher runs beside them. Under docker-compose there is none, and the panel says so."""

from __future__ import annotations

from typing import Any

import httpx

from chaos_panel.acting.control_endpoints import ControlError, call

SERVICE = "the Kafka nodes' control endpoint"
NOT_AVAILABLE = (
    "broker faults need the Kafka nodes' control endpoint, which the native launcher runs (`make up`); "
    "with docker-compose, stop or pause the kafka containers by hand"
)


class BrokerFaults:
    def __init__(self, url: str, timeout: float = 20) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client(timeout=timeout)

    @property
    def available(self) -> bool:
        return bool(self.url)

    def nodes(self) -> dict[str, Any]:
        """Each node with its state, role and the partitions it leads; {"error": …} when unknown."""
        if not self.available:
            return {"nodes": [], "error": NOT_AVAILABLE}
        try:
            return dict(call(self._client, "GET", SERVICE, f"{self.url}/nodes"))
        except ControlError as error:
            return {"nodes": [], "error": str(error)}

    def kill_leader(self, topic: str, partition: int) -> str:
        return self._act("/kill-leader", {"topic": topic, "partition": partition})

    def freeze(self, node: int, seconds: float) -> str:
        return self._act("/freeze", {"node": node, "seconds": seconds})

    def restart_controller(self) -> str:
        return self._act("/restart-controller", {})

    def _act(self, path: str, body: dict[str, Any]) -> str:
        if not self.available:
            raise ControlError(NOT_AVAILABLE, 409)
        return str(call(self._client, "POST", SERVICE, f"{self.url}{path}", json=body)["fault"])

    def close(self) -> None:
        self._client.close()
