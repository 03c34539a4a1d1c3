"""What Kafka Connect's REST API says of a connector, in one word: for the launcher, which waits
for Debezium's connectors to run, and the panel, which shows them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def connector_state(status: Mapping[str, Any]) -> tuple[str, str]:
    """(state, why) of one connector from its `/connectors/<name>/status` document: FAILED with the
    first line of its trace when the connector or a task failed (Kafka Connect leaves a connector
    RUNNING when its task failed, and never restarts the task by itself); else the connector's own
    state when it is not RUNNING (PAUSED, ...); else RUNNING once every task runs, or the state of
    the first that does not (UNASSIGNED while there is none yet)."""
    connector = status.get("connector") or {}
    tasks = list(status.get("tasks") or [])
    for part in (connector, *tasks):
        if part.get("state") == "FAILED":
            trace = str(part.get("trace") or "").strip()
            return "FAILED", (trace.splitlines() or ["no trace"])[0]
    if connector.get("state", "UNASSIGNED") != "RUNNING":
        return str(connector.get("state", "UNASSIGNED")), ""
    waiting = [str(task.get("state", "UNASSIGNED")) for task in tasks if task.get("state") != "RUNNING"]
    return (waiting[0] if waiting else "RUNNING") if tasks else "UNASSIGNED", ""
