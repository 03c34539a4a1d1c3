"""The hang guard (tests/support/hang_guard.py) ends a run that pytest-timeout cannot, with the
stack of the test that hung, and leaves a run that does not hang alone. Each case is a pytest run
of its own, in a child process, with a timeout and a grace of one second."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Only the plugins under test, not every installed one: each run starts in a second.
PLUGINS = ("-p", "pytest_timeout", "-p", "tests.support.hang_guard", "-p", "no:cacheprovider")


def _pytest(tmp_path: Path, tests: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_case.py").write_text(textwrap.dedent(tests))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EO_HANG_GRACE_SECONDS": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", *PLUGINS, "-o", "timeout=1", "-q"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_test_blocked_where_no_signal_reaches_ends_the_run_with_its_stack(tmp_path: Path) -> None:
    run = _pytest(
        tmp_path,
        """
        import signal, time

        def test_blocked():
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # pytest-timeout's signal
            time.sleep(50)
        """,
    )
    assert run.returncode == 3, run.stdout + run.stderr
    assert "HANG: test_case.py::test_blocked still runs 1 s past its timeout" in run.stderr
    assert "line 6 in test_blocked" in run.stderr


def test_tests_that_end_within_their_timeout_are_left_alone(tmp_path: Path) -> None:
    run = _pytest(
        tmp_path,
        """
        import pytest, time

        @pytest.mark.parametrize("n", range(6))
        def test_quick(n):
            time.sleep(0.5)  # six of them outlast one timeout and its grace: each test disarms
        """,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "HANG" not in run.stderr


def test_a_process_that_does_not_exit_after_its_last_test_is_ended(tmp_path: Path) -> None:
    run = _pytest(
        tmp_path,
        """
        import threading

        def test_leaves_a_thread_behind():
            threading.Thread(target=threading.Event().wait, name="left-behind").start()  # waited for at exit
        """,
    )
    assert run.returncode == 3, run.stdout + run.stderr
    assert "1 passed" in run.stdout
    assert "left-behind" in run.stderr and "in wait" in run.stderr  # its name and its stack
    assert "HANG: the test process has not exited 1 s after its last test" in run.stderr
