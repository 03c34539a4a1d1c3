"""The panel's view of Debezium as the relay (RELAY=debezium): each replication slot's retained
write-ahead log, read from PostgreSQL, and each connector's state, paused or resumed through Kafka
Connect's REST API (KAFKA_CONNECT_URL). Under the built-in relay there are no slots to show."""

from __future__ import annotations

from typing import Any

import httpx

from auditor.invariants import Query
from chaos_panel.acting.control_endpoints import ControlError
from services.connect_status import connector_state
from services.topology import CDC_SLOT_PREFIX, cdc_connector

SLOTS = f"""
SELECT slot_name, database, active,
       pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint,
       pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint
  FROM pg_replication_slots WHERE starts_with(slot_name, '{CDC_SLOT_PREFIX}') ORDER BY database
"""
ACTIONS = ("pause", "resume")
NOT_AVAILABLE = "no Kafka Connect worker here: the built-in relay publishes (`make up RELAY=debezium` runs Debezium)"


class CdcRelay:
    def __init__(
        self, connect_url: str, query: Query, timeout: float = 10, transport: httpx.BaseTransport | None = None
    ) -> None:
        self.url = connect_url.rstrip("/")
        self._query = query
        self._client = httpx.Client(timeout=timeout, transport=transport)

    @property
    def available(self) -> bool:
        return bool(self.url)

    @property
    def relay(self) -> str:
        """The relay this system runs, as RELAY names it: debezium where a Connect worker answers."""
        return "debezium" if self.available else "builtin"

    def slots(self) -> dict[str, Any]:
        """Each outbox database's slot: active, retained bytes, bytes not yet confirmed, and its
        connector's state; {"slots": [], "error": ...} when they cannot be read."""
        if not self.available:
            return {"slots": [], "error": NOT_AVAILABLE}
        try:
            rows = self._query("orders", SLOTS)
        except Exception as error:
            return {"slots": [], "error": f"the slots could not be read: {error}"}
        states = self._connector_states()
        return {
            "slots": [
                {
                    "slot": slot,
                    "database": database,
                    "active": bool(active),
                    "retained_bytes": int(retained or 0),
                    "unconfirmed_bytes": int(unconfirmed or 0),
                    "connector": states.get(cdc_connector(database), "unknown"),
                }
                for slot, database, active, retained, unconfirmed in rows
            ],
            "error": "" if states else "the Connect worker does not answer (it may be starting again)",
        }

    def _connector_states(self) -> dict[str, str]:
        """Connector name -> its state (services/connect_status.py): FAILED when its task failed."""
        try:
            answer = self._client.get(f"{self.url}/connectors", params={"expand": "status"})
            answer.raise_for_status()
            return {name: connector_state(detail["status"])[0] for name, detail in dict(answer.json()).items()}
        except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError):
            return {}

    def act(self, database: str, action: str) -> str:
        """Pause or resume `database`'s connector; what was done, in a sentence."""
        if not self.available:
            raise ControlError(NOT_AVAILABLE, 409)
        if action not in ACTIONS:
            raise ControlError(f"action must be one of {', '.join(ACTIONS)}", 400)
        connectors = self._connector_states()
        name = cdc_connector(database)
        if name not in connectors:
            known = ", ".join(sorted(c.removeprefix("outbox-") for c in connectors)) or "none answers now"
            raise ControlError(f"no connector for database {database!r} (known: {known})", 400)
        try:
            self._client.put(f"{self.url}/connectors/{name}/{action}").raise_for_status()
        except httpx.HTTPError as error:
            raise ControlError(f"Kafka Connect refused to {action} {name}: {error}", 502) from error
        if action == "pause":
            return f"paused {name}: its slot now keeps every byte of log written from here on"
        return f"resumed {name}: it reads on from its slot's confirmed position, and the slot empties"

    def resume_paused(self) -> list[str]:
        """Resume every paused connector (part of the panel's reset); what could not be resumed."""
        problems = []
        for name, state in self._connector_states().items() if self.available else ():
            if state != "PAUSED":
                continue
            try:
                self._client.put(f"{self.url}/connectors/{name}/resume").raise_for_status()
            except httpx.HTTPError as error:
                problems.append(f"{name}: Kafka Connect refused to resume it: {error}")
        return problems

    def close(self) -> None:
        self._client.close()
