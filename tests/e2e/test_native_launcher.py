"""`make up` from nothing to healthy, a supervised process killed and brought back, `make down`
leaving nothing behind. A stack of its own, so a running `make up` is never disturbed."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator

import httpx
import pytest

from infra.launcher.preflight import port_is_free
from infra.launcher.processes import platform_programs
from infra.launcher.supervisor import Supervisor
from tests.support.launcher_run import LauncherRun


@pytest.fixture(scope="module")
def run() -> Iterator[LauncherRun]:
    launched = LauncherRun()
    yield launched
    launched.launcher("down")
    launched.remove()


def test_up_brings_every_process_up_healthy_and_prints_the_urls(run: LauncherRun) -> None:
    result = run.launcher("up")
    assert result.returncode == 0, result.stdout + result.stderr
    panel = f"http://127.0.0.1:{run.ports['CHAOS_PANEL_PORT']}"
    assert "healthy in" in result.stdout
    assert panel in result.stdout
    assert f"127.0.0.1:{run.ports['KAFKA_PORT']}" in result.stdout

    status = run.launcher("status")
    assert status.returncode == 0, status.stdout
    for name in ("postgres", "kafka", *(p.name for p in platform_programs(run.settings()))):
        assert re.search(rf"^\s*{name}\s+RUNNING", status.stdout, re.M), status.stdout
    page = httpx.get(panel + "/", timeout=10)
    assert page.status_code == 200
    verdict = httpx.get(panel + "/fragments/verdict", timeout=10).text  # the auditor runs once every part answers
    assert "Green: nothing lost, nothing doubled." in verdict, verdict


def test_a_second_up_is_idempotent_and_fast(run: LauncherRun) -> None:
    before = Supervisor(run.state_dir).info("kafka")["pid"]
    result = run.launcher("up")
    assert result.returncode == 0, result.stderr
    assert "kafka is running" in result.stdout
    assert Supervisor(run.state_dir).info("kafka")["pid"] == before


def test_a_supervised_process_killed_with_sigkill_is_back_within_seconds(run: LauncherRun) -> None:
    supervisor = Supervisor(run.state_dir)
    victim = supervisor.info("chaos-panel")["pid"]
    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    health = f"http://127.0.0.1:{run.ports['CHAOS_PANEL_PORT']}/healthz"
    while time.monotonic() - killed_at < 10:
        info = supervisor.info("chaos-panel")
        if info["statename"] == "RUNNING" and info["pid"] not in (0, victim):
            try:
                if httpx.get(health, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
        time.sleep(0.1)
    else:
        pytest.fail(f"chaos-panel was not back within 10 s: {supervisor.info('chaos-panel')}")


def test_restart_replaces_every_platform_process_and_leaves_the_infrastructure_alone(run: LauncherRun) -> None:
    supervisor = Supervisor(run.state_dir)
    before = {info["name"]: info["pid"] for info in supervisor.all_info()}
    result = run.launcher("restart")
    assert result.returncode == 0, result.stdout + result.stderr
    after = {info["name"]: (info["pid"], info["statename"]) for info in supervisor.all_info()}
    for name in (p.name for p in platform_programs(run.settings())):
        assert after[name][1] == "RUNNING" and after[name][0] != before[name], name
    assert after["kafka"][0] == before["kafka"] and after["postgres"][0] == before["postgres"]


def test_down_leaves_no_process_and_no_bound_port(run: LauncherRun) -> None:
    result = run.launcher("down")
    assert result.returncode == 0, result.stderr
    assert "nothing is left running" in result.stdout
    assert run.processes_using_state_dir() == []
    for name, port in run.ports.items():
        assert port_is_free("127.0.0.1", port), f"{name} {port} is still bound"
    assert run.launcher("status").returncode == 3
