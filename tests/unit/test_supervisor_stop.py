"""Supervisor.stop with supervisord's answers scripted: a program that has just exited, which
supervisord is about to start again on its own, is waited for and stopped as well. (A failover
rebuilds the killed PostgreSQL node's data directory: a node started behind its back runs on
half-copied data.) The states and the fault are supervisord's own."""

from __future__ import annotations

import xmlrpc.client
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from infra.launcher.errors import LaunchError
from infra.launcher.supervisor import Supervisor


class _Supervisord:
    """supervisord's RPC for one program, which goes through `states` one call of getProcessInfo
    at a time; stopProcess stops it when it is running, else raises NOT_RUNNING."""

    def __init__(self, states: list[str]) -> None:
        self.states, self.stops = states, 0

    @property
    def state(self) -> str:
        return self.states[0]

    def stopProcess(self, name: str, wait: bool) -> bool:
        self.stops += 1
        if self.state not in ("RUNNING", "STARTING", "BACKOFF"):
            raise xmlrpc.client.Fault(10, f"NOT_RUNNING: {name}")
        self.states = ["STOPPED"]
        return True

    def getProcessInfo(self, name: str) -> dict[str, Any]:
        state = self.state
        if len(self.states) > 1:
            self.states.pop(0)
        return {"statename": state}


class _Scripted(Supervisor):
    def __init__(self, supervisord: _Supervisord) -> None:
        super().__init__(Path("/nowhere"))
        self.proxy = SimpleNamespace(supervisor=supervisord)

    @property
    def _rpc(self) -> Any:
        return self.proxy


@pytest.mark.parametrize(
    "states",
    [
        ["RUNNING"],
        ["BACKOFF"],
        ["EXITED", "EXITED", "STARTING"],  # killed a moment ago: supervisord starts it again
        ["STOPPING", "STOPPED"],
        ["STOPPED"],
        ["FATAL"],
    ],
)
def test_stop_returns_once_the_program_is_stopped_for_good(states: list[str]) -> None:
    supervisord = _Supervisord(states)
    _Scripted(supervisord).stop("postgres-2")
    assert supervisord.state in ("STOPPED", "FATAL")


def test_a_program_that_never_stops_is_an_error_naming_it() -> None:
    supervisord = _Supervisord(["STOPPING"])
    with pytest.raises(LaunchError, match="postgres-2 is still STOPPING 0 s after it was asked to stop"):
        _Scripted(supervisord).stop("postgres-2", timeout=0.3)
