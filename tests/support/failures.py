"""How many tests of this run have failed so far, for fixtures that keep evidence only when one did
(tests/conftest.py counts each failed report)."""

from __future__ import annotations

_failed: list[str] = []


def note(nodeid: str) -> None:
    """Count one failed phase (setup, call or teardown) of test `nodeid`."""
    _failed.append(nodeid)


def count() -> int:
    """The failed phases counted so far in this pytest run."""
    return len(_failed)
