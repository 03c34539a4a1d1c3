"""Every pool of PostgreSQL connections the platform builds bounds its reconnection backoff with
effectively_once.connection_pools.RECONNECT_TIMEOUT, and every pool that checks its connections is
one of that module's serving pools, which drain themselves at a failed check
(tests/integration/test_pool_reconnect.py shows what each does)."""

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
    assert len(calls) >= 3, calls  # the consumers', the serving pools' (sync and asyncio)
    for path, call in calls:
        bound = [keyword.value for keyword in call.keywords if keyword.arg == "reconnect_timeout"]
        assert [getattr(value, "id", None) for value in bound] == ["RECONNECT_TIMEOUT"], (
            f"{path.relative_to(PROJECT_ROOT)}:{call.lineno} builds a pool without reconnect_timeout=RECONNECT_TIMEOUT"
        )


def test_a_pool_checks_its_connections_only_where_a_failed_check_drains_it() -> None:
    checking = [(path, call) for path, call in _pool_calls() if any(k.arg == "check" for k in call.keywords)]
    assert checking, "no pool checks its connections: the serving pools are gone"
    for path, call in checking:
        assert path == PROJECT_ROOT / "effectively_once" / "connection_pools.py", (
            f"{path.relative_to(PROJECT_ROOT)}:{call.lineno} checks its connections without draining at a "
            "failed check: build it with connection_pools.serving_pool or serving_async_pool"
        )
