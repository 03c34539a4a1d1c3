"""The labs' only way into the system: the chaos panel's HTTP API, exactly what its pages use."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

FINAL = ("CONFIRMED", "REJECTED", "CANCELLED")
QUIET_AFTER = 15.0
"""Seconds without a status change after which an unfinished order is taken as stuck, not in flight
(the slowest step a lab stages, the provider's timeout, takes 4 s)."""


class LabError(Exception):
    """The panel refused an action, or a condition never came: the message says which."""


Entry = dict[str, Any]
"""One timeline entry: at, clock, actor, kind, text, detail, message_id."""


class PanelClient:
    def __init__(self, url: str, token: str | None = None, timeout: float = 60) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=timeout, headers=headers)
        self.stuck: set[str] = set()
        """Orders a lab lost on purpose: waiting for quiet does not wait for them."""

    def close(self) -> None:
        self._http.close()

    def _unreachable(self, error: Exception) -> str:
        return f"the panel at {self.url} did not answer ({type(error).__name__}): is `make up` running?"

    # Reading ---------------------------------------------------------------------------------

    def _get(self, path: str, **params: Any) -> Any:
        try:
            response = self._http.get(path, params=params or None)
        except httpx.HTTPError as error:
            raise LabError(self._unreachable(error)) from error
        if response.status_code != 200:
            raise LabError(f"GET {path}: HTTP {response.status_code}: {response.text[:300]}")
        return response.json()

    def processes(self) -> dict[str, dict[str, Any]]:
        return {p["name"]: p for p in self._get("/api/state")["processes"]}

    def order(self, order_id: str) -> dict[str, Any]:
        found: dict[str, Any] = self._get(f"/api/orders/{order_id}")
        return found

    def status(self, order_id: str) -> str:
        return str(self.order(order_id)["status"])

    def event_id(self, order_id: str, event_type: str) -> str:
        for event in self.order(order_id)["events"]:
            if event["event_type"] == event_type:
                return str(event["message_id"])
        raise LabError(f"order {order_id} has no {event_type} yet")

    def timeline(self, order_id: str) -> list[Entry]:
        entries: list[Entry] = self._get(f"/api/orders/{order_id}/timeline")["entries"]
        return entries

    def proof(self, order_id: str, effect: str) -> dict[str, Any]:
        """One effect of the order as its proof page shows it: deliveries, marker, rows, verdict."""
        for found in self._get(f"/api/orders/{order_id}/proof")["effects"]:
            if found["effect"] == effect:
                return dict(found)
        raise LabError(f"the proof of order {order_id} has no effect named {effect!r}")

    def audit(self, stuck_after: float | None = None) -> dict[str, Any]:
        verdict: dict[str, Any] = self._get("/api/audit", **({"stuck_after": stuck_after} if stuck_after else {}))
        return verdict

    def anomalies(self, order_id: str, stuck_after: float | None = None) -> list[dict[str, str]]:
        return [a for a in self.audit(stuck_after)["anomalies"] if a["subject"] == order_id]

    def brokers(self) -> list[dict[str, Any]]:
        """The Kafka nodes: process, state, controller, frozen, the partitions each leads."""
        answer: dict[str, Any] = self._get("/api/brokers")
        if answer.get("error"):
            raise LabError(str(answer["error"]))
        return list(answer["nodes"])

    def databases(self) -> dict[str, Any]:
        """The PostgreSQL pair (POSTGRES=ha): its nodes, the replication mode, the failovers."""
        answer: dict[str, Any] = self._get("/api/databases")
        if answer.get("error"):
            raise LabError(str(answer["error"]))
        return answer

    def kafka_side(self) -> dict[str, Any]:
        """What Kafka holds against the databases: the lost and the phantoms, order by order."""
        answer: dict[str, Any] = self._get("/api/kafka-side")
        return answer

    def relay(self) -> str:
        """The relay this system runs: builtin or debezium."""
        return str(self._get("/api/state").get("relay", "builtin"))

    def share_groups(self) -> tuple[bool, float]:
        """Whether the sales projection and the notification dispatch consume as share groups, and
        how many seconds a record stays locked to the member that received it."""
        answer = self._get("/api/state").get("share_groups") or {}
        return bool(answer.get("on")), float(answer.get("lock_seconds", 30))

    def slots(self) -> dict[str, dict[str, Any]]:
        """Under RELAY=debezium, by database: its slot, retained bytes and connector's state."""
        return {slot["database"]: slot for slot in self._get("/api/slots")["slots"]}

    def sandbox_faults(self, sandbox: str) -> dict[str, Any]:
        faults: dict[str, Any] = self._get(f"/api/sandbox-faults/{sandbox}")
        return faults

    def dead_letters(self) -> list[dict[str, str]]:
        letters: list[dict[str, str]] = self.audit()["dead_letters"]
        return letters

    # Acting ----------------------------------------------------------------------------------

    def act(self, path: str, **body: Any) -> dict[str, Any]:
        try:
            response = self._http.post(f"/api/{path}", json=body)
        except httpx.HTTPError as error:
            raise LabError(self._unreachable(error)) from error
        try:
            answer: dict[str, Any] = response.json()
        except ValueError:
            raise LabError(f"POST /api/{path}: HTTP {response.status_code}: {response.text[:300]}") from None
        if response.status_code != 200 or not answer.get("ok"):
            raise LabError(f"POST /api/{path} was refused: {answer.get('message') or answer}")
        return answer

    def place_order(self, kind: str = "ok") -> str:
        return str(self.act("orders", kind=kind)["order_id"])

    # Waiting ---------------------------------------------------------------------------------

    def wait(self, condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.25) -> None:
        """Until `condition()` holds; LabError naming `what` after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise LabError(f"waited {timeout:.0f} s for {what}")
            time.sleep(interval)

    def wait_status(self, order_id: str, statuses: tuple[str, ...] = FINAL, timeout: float = 60) -> str:
        self.wait(lambda: self.status(order_id) in statuses, timeout, f"order {order_id} to be {'/'.join(statuses)}")
        return self.status(order_id)

    def wait_entry(self, order_id: str, what: str, matches: Callable[[Entry], bool], timeout: float = 60) -> Entry:
        """Until the order's timeline holds an entry that `matches`; returns it."""
        found: list[Entry] = []

        def present() -> bool:
            found[:] = [entry for entry in self.timeline(order_id) if matches(entry)]
            return bool(found)

        self.wait(present, timeout, f"{what} on the timeline of order {order_id}")
        return found[0]

    def wait_quiet(self, timeout: float = 90) -> None:
        """Until no order is in flight (a lab's fault must meet its own order's messages). An order
        a lab lost on purpose, or one that has not moved for QUIET_AFTER seconds, moves no more."""

        def quiet() -> bool:
            recent = self._get("/api/orders", limit=200)["orders"]
            return all(
                o["status"] in FINAL or o["order_id"] in self.stuck or o["idle_seconds"] > QUIET_AFTER for o in recent
            )

        self.wait(quiet, timeout, "the orders in flight to finish")

    def wait_restarted(self, process: str, before: int, timeout: float = 60) -> None:
        self.wait(
            lambda: self.processes()[process]["restarts"] > before and self.processes()[process]["up"],
            timeout,
            f"{process} to be restarted by its supervisor",
        )
