"""The benchmarks' reading of a process's CPU counts its whole tree: a server's sessions are its
children (PostgreSQL's backends), and must be counted as the server's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.process_cpu import _own_cpu_seconds, _processes, trees_cpu_seconds

pytestmark = pytest.mark.unit


def test_a_root_counts_its_children_and_their_children_and_nothing_else() -> None:
    own = {1: 1.0, 10: 2.0, 11: 0.5, 100: 0.25, 20: 4.0}
    parent = {1: 0, 10: 1, 11: 1, 100: 10, 20: 0}
    assert trees_cpu_seconds(own, parent, [1, 20, 10]) == {1: 3.75, 20: 4.0, 10: 2.25}


def test_a_root_that_has_ended_counts_nothing() -> None:
    assert trees_cpu_seconds({1: 1.0}, {1: 0}, [7]) == {7: 0.0}


def test_proc_is_read_with_this_process_and_its_parent() -> None:
    own, parent = _processes()
    assert parent[os.getpid()] == os.getppid()
    assert own[os.getpid()] > 0


def test_a_child_that_ended_still_counts_for_its_parent() -> None:
    """Its CPU moves to its parent's count of ended children; the tree's sum must not drop."""
    before = _processes()[0][os.getpid()]
    child = subprocess.run(
        [sys.executable, "-c", "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"],
        check=True,
    )
    assert child.returncode == 0
    assert _processes()[0][os.getpid()] - before >= 0.25


def test_a_pid_files_process_counts_its_own_cpu_without_its_ended_childrens(tmp_path: Path) -> None:
    """The supervisor reaps the programs it restarts: their CPU is not the supervisor's own."""
    pid_file = tmp_path / "supervisord.pid"
    pid_file.write_text(f"{os.getpid()}\n")
    before = _own_cpu_seconds(pid_file)
    subprocess.run(
        [sys.executable, "-c", "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"],
        check=True,
    )
    assert _own_cpu_seconds(pid_file) - before < 0.25
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    assert _own_cpu_seconds(pid_file) - before >= 0.15


def test_a_pid_file_missing_or_garbled_counts_nothing(tmp_path: Path) -> None:
    assert _own_cpu_seconds(tmp_path / "none.pid") == 0.0
    (tmp_path / "garbled.pid").write_text("not a pid")
    assert _own_cpu_seconds(tmp_path / "garbled.pid") == 0.0
