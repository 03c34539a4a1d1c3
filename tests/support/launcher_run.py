"""Run the native launcher as `make up` does, in a state directory and on ports of its own."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from services.settings import PROJECT_ROOT, Settings
from tests.support import failures
from tests.support.stacks import JAVA_QUICK_START
from workbench.network import free_ports


def _system_ports() -> dict[str, int]:
    """Every port a system binds: single ones, room for REPLICAS above CONTROL_PORT_BASE, six
    consecutive ports from KAFKA_PORT for up to three Kafka nodes (client and controller each), and
    two from POSTGRES_PORT for a primary and its standby (POSTGRES=ha)."""
    ports = free_ports(
        (
            "CHAOS_PANEL_PORT",
            "ORDERS_API_PORT",
            "PAYMENT_PROVIDER_PORT",
            "MAIL_PORT",
            "PROMETHEUS_PORT",
            "KAFKA_CONNECT_PORT",
        ),
        {"CONTROL_PORT_BASE": 60, "KAFKA_PORT": 6, "POSTGRES_PORT": 2},
    )
    return {**ports, "KAFKA_CONTROLLER_PORT": ports["KAFKA_PORT"] + 1}


@dataclass
class LauncherRun:
    """A separate native stack: its own state directory and ports, so tests never touch yours."""

    state_dir: Path = field(
        # Beside the default state directories: reachable by the `postgres` user when root.
        default_factory=lambda: Settings().EO_STATE_DIR.parent / f"e2e-{uuid.uuid4().hex[:8]}"
    )
    ports: dict[str, int] = field(default_factory=lambda: _system_ports())
    overrides: dict[str, str] = field(
        default_factory=lambda: {"PROMETHEUS_SCRAPE_INTERVAL_SECONDS": "2", "KAFKA_JVM_OPTIONS": JAVA_QUICK_START}
    )

    @property
    def environment(self) -> dict[str, str]:
        environment = {
            key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "KAFKA_BOOTSTRAP_SERVERS")
        }
        environment.update({key: str(value) for key, value in self.ports.items()})
        environment["EO_STATE_DIR"] = str(self.state_dir)
        environment.update(self.overrides)
        return environment

    def settings(self) -> Settings:
        """The settings the launched processes see."""
        return Settings.model_validate(
            {
                **{k: v for k, v in self.environment.items() if k in Settings.model_fields},
                "DATABASE_URL": None,
                "KAFKA_BOOTSTRAP_SERVERS": None,
            }
        )

    def launcher(self, *arguments: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "infra.launcher", *arguments],
            cwd=PROJECT_ROOT,
            env=self.environment,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def soak(self, log: Path, *arguments: str, timeout: float = 800) -> tuple[int, str]:
        """`python -m soak` against this system, printing into `log` and writing its history beside
        it (`<log>-history.jsonl`: soaks of runs side by side never share one), both kept as
        artifacts; its exit status and the end of what it printed, after a line that sums it up
        (`_soak_outcome`)."""
        log.parent.mkdir(parents=True, exist_ok=True)
        history = log.with_name(f"{log.stem}-history.jsonl")
        with log.open("w") as output:
            result = subprocess.run(
                [sys.executable, "-m", "soak", "--history", str(history), *arguments],
                cwd=PROJECT_ROOT,
                env=self.environment,
                stdout=output,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            )
        return result.returncode, _soak_outcome(log.read_text())

    def processes_using_state_dir(self) -> list[str]:
        """Command lines of live processes that mention this run's state directory."""
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                zombie = "\nState:\tZ" in (proc / "status").read_text()
            except OSError:
                continue
            if str(self.state_dir) in command and not zombie:
                found.append(f"{proc.name}: {command}")
        return found

    def remove(self) -> None:
        shutil.rmtree(self.state_dir, ignore_errors=True)


def _soak_outcome(printed: str) -> str:
    """The end of a soak's output (a line printed again and again while it waits, once), after a
    first line with its verdict and counts: a test summary shows an assertion's first line only."""
    every = printed.splitlines()
    lines = [line for n, line in enumerate(every) if n == 0 or line != every[n - 1]]
    counted = ("anomalies ", "orders not terminal", "not carried out", "soak: ", "SOAK: ")
    summary = [" ".join(line.split()) for line in lines if line.strip().startswith(counted)]
    verdict = "; ".join(summary[-6:]) or "the soak printed no verdict"
    return verdict + "\n" + "\n".join(lines)[-8000:]


def _named_log_tail(output: str, lines: int = 40) -> str:
    """The last lines of the log a launcher failure names ("read its log: PATH"): the state
    directory, and the log with it, is removed once the failed system is taken down."""
    named = re.search(r"read its log: (\S+)", output)
    if not named or not Path(named.group(1)).is_file():
        return ""
    tail = Path(named.group(1)).read_text(errors="replace").splitlines()[-lines:]
    return f"\n--- the last {len(tail)} lines of {named.group(1)}:\n" + "\n".join(tail)


KEPT_LOGS = PROJECT_ROOT / "artifacts" / "systems"
"""Where a system's process logs are kept when a test failed while it ran."""


def keep_logs(run: LauncherRun, kept: Path = KEPT_LOGS) -> Path | None:
    """Copy the system's process logs to `kept`/<its state directory's name>, before the state
    directory goes: what a failed test's processes said is read after the run."""
    logs = run.state_dir / "logs"
    if not logs.is_dir():
        return None
    target = kept / run.state_dir.name
    shutil.copytree(logs, target, dirs_exist_ok=True)
    return target


@contextmanager
def running_system(**overrides: str) -> Iterator[LauncherRun]:
    """A whole system of its own (`make up` on its own ports and state), taken down afterwards;
    `overrides` are settings for it (REPLICAS="2"). When a test failed while it ran, its process
    logs are kept in artifacts/systems/ (keep_logs)."""
    run = LauncherRun()
    run.overrides.update(overrides)
    failed_before = failures.count()
    result = run.launcher("up")
    try:  # a failed `up` is taken down too: what it started must not outlive the test
        assert result.returncode == 0, result.stdout + result.stderr + _named_log_tail(result.stderr)
        yield run
    finally:
        run.launcher("down")
        if result.returncode != 0 or failures.count() > failed_before:
            kept = keep_logs(run)
            if kept:
                print(f"\nthe logs of the system in {run.state_dir} are kept in {kept}")
        run.remove()
