"""Bad configuration stops `make up` with what is wrong and how to fix it, never a stack trace."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.support.launcher_run import LauncherRun
from workbench.network import free_port


@pytest.fixture
def run() -> Iterator[LauncherRun]:
    launched = LauncherRun()
    yield launched
    launched.launcher("down")
    launched.remove()


def _assert_refused(result_stdout: str, result_stderr: str, returncode: int, *phrases: str) -> None:
    assert returncode == 2, result_stdout + result_stderr
    assert "Traceback" not in result_stdout + result_stderr
    assert "how to fix:" in result_stderr
    for phrase in phrases:
        assert phrase in result_stderr, result_stderr


def test_a_port_already_taken_is_named_with_the_setting_to_change(run: LauncherRun) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", run.ports["KAFKA_PORT"]))
        squatter.listen()
        result = run.launcher("up")
    _assert_refused(
        result.stdout,
        result.stderr,
        result.returncode,
        f"port {run.ports['KAFKA_PORT']}",
        "already in use",
        "KAFKA_PORT",
    )
    assert run.processes_using_state_dir() == []


def test_java_missing_says_how_to_install_it(run: LauncherRun) -> None:
    run.overrides.update({"PATH": "/nonexistent", "JAVA_HOME": ""})
    result = run.launcher("up")
    _assert_refused(result.stdout, result.stderr, result.returncode, "Java was not found", "openjdk-17")


def test_an_unreachable_database_url_is_reported_with_its_password_hidden(run: LauncherRun) -> None:
    port = free_port()
    run.overrides["DATABASE_URL"] = f"postgresql://postgres:s3cret@127.0.0.1:{port}/postgres"
    result = run.launcher("up")
    _assert_refused(
        result.stdout,
        result.stderr,
        result.returncode,
        f"127.0.0.1:{port}",
        "did not answer",
        "DATABASE_URL",
    )
    assert "s3cret" not in result.stdout + result.stderr
