"""Every pool of PostgreSQL connections the platform builds bounds its reconnection backoff with
effectively_once.connection_pools.RECONNECT_TIMEOUT (tests/integration/test_pool_reconnect.py
shows what the bound does)."""

from __future__ import annotations

import ast
from pathlib import Path

from services.settings import PROJECT_ROOT

PACKAGES = ("effectively_once", "services", "outbox_relay", "chaos_panel", "auditor", "soak", "labs", "workbench")
POOLS = {"ConnectionPool", "AsyncConnectionPool", "NullConnectionPool", "AsyncNullConnectionPool"}


def _pool_calls() -> list[tuple[Path, ast.Call]]:
    found = []
    for package in PACKAGES:
        for path in sorted((PROJECT_ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Call):
                    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                    if name in POOLS:
                        found.append((path, node))
    return found


def test_every_pool_is_built_with_the_reconnect_bound() -> None:
    calls = _pool_calls()
    assert len(calls) >= 4, calls  # the consumers', the orders API's, the two sandboxes'
    for path, call in calls:
        bound = [keyword.value for keyword in call.keywords if keyword.arg == "reconnect_timeout"]
        assert [getattr(value, "id", None) for value in bound] == ["RECONNECT_TIMEOUT"], (
            f"{path.relative_to(PROJECT_ROOT)}:{call.lineno} builds a pool without reconnect_timeout=RECONNECT_TIMEOUT"
        )
