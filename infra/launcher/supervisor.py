"""supervisord, configured by the launcher, keeps every native process running.

Any process that dies is started again at once (chaos depends on it); `make down` stops them all
and then supervisord itself. The launcher talks to it over XML-RPC on a Unix socket.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
import xmlrpc.client
from dataclasses import dataclass, field
from http.client import HTTPException
from pathlib import Path
from typing import Any, cast

from supervisor.xmlrpc import SupervisorTransport

from effectively_once.kafka_client import ENVIRONMENT_VARIABLES as KAFKA_PRINCIPAL_VARIABLES
from infra.launcher.errors import LaunchError


@dataclass(frozen=True)
class Program:
    """One supervised process."""

    name: str
    command: list[str]
    environment: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    stop_signal: str = "TERM"
    stop_wait_seconds: int = 20
    ports: tuple[int, ...] = ()
    """Loopback ports it listens on; checked free before it starts."""
    priority: int = 900
    """Lower starts first and stops last (infrastructure below the platform)."""
    health_url: str | None = None
    """An HTTP URL that answers 200 once the process is ready (None: running is ready)."""
    urls: dict[str, str] = field(default_factory=dict)
    """What `make up` prints for people: label -> URL."""


def _escape(value: str) -> str:
    # supervisord expands %(name)s in its values; a literal % is written %%.
    return value.replace("%", "%%")


def _quote_value(key: str, value: str) -> str:
    """Quote for supervisord's KEY="v",K2='v2' parser, which knows quotes but no escapes."""
    if value[:1] in "'\"" or value[-1:] in "'\"":
        raise LaunchError(
            f"the value of {key} starts or ends with a quote, which supervisord would drop",
            f"change {key} so that it does not",
        )
    if '"' not in value:
        return f'"{value}"'
    if "'" not in value:
        return f"'{value}'"
    raise LaunchError(
        f"the value of {key} holds both kinds of quote, which supervisord cannot pass on",
        f"change {key} to use at most one kind of quote",
    )


def render_config(state_dir: Path, programs: list[Program]) -> str:
    """The supervisord.conf for these programs; none starts until the launcher asks."""
    sock, logs = socket_path(state_dir), state_dir / "logs"
    lines = [
        "; Written by the launcher (infra/launcher); do not edit, it is rewritten on `make up`.",
        "[unix_http_server]",
        f"file={sock}",
        "chmod=0700",
        "",
        "[supervisord]",
        f"logfile={logs / 'supervisord.log'}",
        f"pidfile={pid_path(state_dir)}",
        f"childlogdir={logs}",
        "logfile_maxbytes=5MB",
        "loglevel=info",
        "minfds=4096",
        "",
        "[rpcinterface:supervisor]",
        "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface",
        "",
        "[supervisorctl]",
        f"serverurl=unix://{sock}",
        "",
    ]
    for program in programs:
        environment = ",".join(
            f"{key}={_quote_value(key, _escape(value))}" for key, value in sorted(program.environment.items())
        )
        lines += [
            f"[program:{program.name}]",
            f"command={_escape(shlex.join(program.command))}",
            "autostart=false",
            f"priority={program.priority}",
            "autorestart=true",
            "startsecs=1",
            "startretries=1000",
            f"stopsignal={program.stop_signal}",
            f"stopwaitsecs={program.stop_wait_seconds}",
            "stopasgroup=true",
            "killasgroup=true",
            "redirect_stderr=true",
            f"stdout_logfile={logs / (program.name + '.log')}",
            "stdout_logfile_maxbytes=20MB",
            "stdout_logfile_backups=2",
        ]
        if environment:
            lines.append(f"environment={environment}")
        if program.user:
            lines.append(f"user={program.user}")
        lines.append("")
    return "\n".join(lines)


STOPPED_FOR_GOOD = ("STOPPED", "FATAL")
"""The states supervisord leaves a program in until asked to start it (FATAL: it gave up)."""


def socket_path(state_dir: Path) -> Path:
    return state_dir / "supervisor" / "supervisor.sock"


def pid_path(state_dir: Path) -> Path:
    return state_dir / "supervisor" / "supervisord.pid"


def config_path(state_dir: Path) -> Path:
    return state_dir / "supervisor" / "supervisord.conf"


class Supervisor:
    """A handle on the supervisord of one state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    @property
    def _rpc(self) -> Any:
        # A fresh proxy per call: a transport left broken by a refused call cannot be reused.
        transport = SupervisorTransport(None, None, f"unix://{socket_path(self.state_dir)}")
        return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport)

    def is_running(self) -> bool:
        try:
            return bool(self._rpc.supervisor.getState()["statename"] == "RUNNING")
        except (OSError, HTTPException, xmlrpc.client.Fault, xmlrpc.client.ProtocolError):
            return False

    def start_daemon(self, programs: list[Program]) -> None:
        """Write the configuration; start supervisord, or make a running one take it up."""
        config = config_path(self.state_dir)
        config.parent.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "logs").mkdir(parents=True, exist_ok=True)
        config.write_text(render_config(self.state_dir, programs))
        if self.is_running():
            self._update()
            return
        socket_path(self.state_dir).unlink(missing_ok=True)
        supervisord = Path(sys.executable).parent / "supervisord"
        start_log = self.state_dir / "logs" / "supervisord.start.log"
        with start_log.open("wb") as errors:
            started = subprocess.run(
                [str(supervisord), "-c", str(config)],
                # The launcher acts as the Kafka admin; what supervisord starts must not inherit it.
                env={key: value for key, value in os.environ.items() if key not in KAFKA_PRINCIPAL_VARIABLES},
                check=False,
                stdin=subprocess.DEVNULL,
                stdout=errors,
                stderr=errors,
            )
        if started.returncode != 0:
            raise LaunchError(
                f"supervisord refused to start: {start_log.read_text(errors='replace').strip()}",
                f"fix what it says in {config} (written by the launcher from the settings)",
            )
        deadline = time.monotonic() + 20
        while not self.is_running():
            if time.monotonic() > deadline:
                raise LaunchError(
                    "supervisord did not start",
                    f"read {self.state_dir / 'logs' / 'supervisord.log'}",
                )
            time.sleep(0.1)

    def _update(self) -> None:
        """Like `supervisorctl update`: take up added and changed programs, drop removed ones."""
        [[added, changed, removed]] = self._rpc.supervisor.reloadConfig()
        for name in changed + removed:
            self._rpc.supervisor.stopProcessGroup(name)
            self._rpc.supervisor.removeProcessGroup(name)
        for name in changed + added:
            self._rpc.supervisor.addProcessGroup(name)

    def start(self, name: str, wait: bool = True) -> None:
        """Start `name` unless it runs; with `wait`, return once it has stayed up a second."""
        info = self.info(name)
        if info["statename"] in ("RUNNING", "STARTING"):
            return
        try:
            self._rpc.supervisor.startProcess(name, wait)
        except xmlrpc.client.Fault as fault:
            raise LaunchError(
                f"{name} could not be started ({fault.faultString})",
                f"read its log: {self.log_path(name)}",
            ) from fault

    def stop(self, name: str, timeout: float = 60) -> None:
        """Stop `name`; return once supervisord holds it stopped. A process that has just exited
        (killed, crashed) is about to be started again, every program restarting on its own: it is
        waited for and stopped as well, so that nothing starts it behind the caller's back (a
        PostgreSQL node whose data directory is being rebuilt, say)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._rpc.supervisor.stopProcess(name, True)
            except xmlrpc.client.Fault as fault:
                if "NOT_RUNNING" not in fault.faultString:
                    raise
            state = self.info(name)["statename"]
            if state in STOPPED_FOR_GOOD:
                return
            if time.monotonic() > deadline:
                raise LaunchError(
                    f"{name} is still {state} {timeout:.0f} s after it was asked to stop",
                    f"read its log: {self.log_path(name)}",
                )
            time.sleep(0.1)  # exited, about to start again: stopped once it has

    def signal(self, name: str, signal: str) -> None:
        """Send `signal` ("KILL", "STOP", "CONT"…) to `name`'s process, as a fault would; after a
        KILL, supervisord starts it again as after any crash."""
        self._rpc.supervisor.signalProcess(name, signal)

    def info(self, name: str) -> dict[str, Any]:
        return cast(dict[str, Any], self._rpc.supervisor.getProcessInfo(name))

    def all_info(self) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], self._rpc.supervisor.getAllProcessInfo())

    def log_path(self, name: str) -> Path:
        return self.state_dir / "logs" / f"{name}.log"

    def shutdown(self, timeout: float = 60) -> None:
        """Stop every process, then supervisord; return when its pid has exited."""
        pid_file = pid_path(self.state_dir)
        pid = int(pid_file.read_text()) if pid_file.exists() else None
        if self.is_running():
            self._rpc.supervisor.shutdown()
        deadline = time.monotonic() + timeout
        while pid and _alive(pid):
            if time.monotonic() > deadline:
                raise LaunchError(
                    f"supervisord (pid {pid}) did not stop within {timeout:.0f} s",
                    f"kill it by hand: kill {pid}",
                )
            time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie we do not reap still answers kill(0); /proc tells it apart.
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
