"""The alert rules, checked and tested by Prometheus's own promtool (installed with Prometheus)."""

from __future__ import annotations

import subprocess

from infra.launcher import prometheus_server

TESTS = prometheus_server.ALERTS.with_name("alerts.test.yml")


def _promtool(*arguments: str) -> subprocess.CompletedProcess[str]:
    promtool = prometheus_server.binary_path().replace("prometheus", "promtool")
    return subprocess.run([promtool, *arguments], capture_output=True, text=True, check=False, timeout=60)


def test_the_alert_rules_are_valid() -> None:
    checked = _promtool("check", "rules", str(prometheus_server.ALERTS))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_slot_that_keeps_growing_fires_its_alert_and_an_idle_one_does_not() -> None:
    """Every rule's promtool test (alerts.test.yml): a slot that keeps growing fires and an idle
    one does not; a partition stalled for minutes fires and one that recovered does not."""
    tested = _promtool("test", "rules", str(TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
