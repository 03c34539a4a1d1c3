"""A system's process logs outlive its state directory when a test failed while it ran."""

from __future__ import annotations

from pathlib import Path

from tests.support.launcher_run import LauncherRun, keep_logs


def test_the_logs_are_copied_under_the_state_directorys_name(tmp_path: Path) -> None:
    run = LauncherRun(state_dir=tmp_path / "e2e-1234abcd", ports={})
    (run.state_dir / "logs").mkdir(parents=True)
    (run.state_dir / "logs" / "orders-api.log").write_text("error connecting in pool\n")
    kept = keep_logs(run, tmp_path / "artifacts")
    assert kept == tmp_path / "artifacts" / "e2e-1234abcd"
    assert (kept / "orders-api.log").read_text() == "error connecting in pool\n"


def test_a_system_that_wrote_no_logs_keeps_nothing(tmp_path: Path) -> None:
    run = LauncherRun(state_dir=tmp_path / "e2e-never-up", ports={})
    assert keep_logs(run, tmp_path / "artifacts") is None
    assert not (tmp_path / "artifacts").exists()
