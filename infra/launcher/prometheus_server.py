"""Prometheus on the native path: Debian's `prometheus` binary, a configuration written from the
same process list the launcher supervises, data in EO_STATE_DIR. Compose runs the official image
with infra/prometheus/prometheus.compose.yml; a test keeps the two scraping the same processes."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import yaml

from infra.launcher.errors import LaunchError
from services.settings import PROJECT_ROOT, Settings

BINARY = "prometheus"
ALERTS = PROJECT_ROOT / "infra" / "prometheus" / "alerts.yml"
"""The alert rules, the same file compose mounts."""


def binary_path() -> str:
    return shutil.which(BINARY) or f"/usr/bin/{BINARY}"


def ensure_installed(say: Callable[[str], None]) -> str:
    """Debian's prometheus, installed when missing (as root); its path."""
    if Path(binary_path()).exists():
        return binary_path()
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise LaunchError(
            "Prometheus is not installed",
            "install it (on Debian: `sudo apt-get install --no-install-recommends prometheus`)",
        )
    say("installing Debian's prometheus package (first run only)")
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "prometheus"]
    result = subprocess.run(install, capture_output=True, text=True, check=False, env=environment)
    if result.returncode != 0:  # the package lists may be stale: refresh them once
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, check=False, env=environment)
        result = subprocess.run(install, capture_output=True, text=True, check=False, env=environment)
    if result.returncode != 0 or not Path(binary_path()).exists():
        raise LaunchError(f"`{' '.join(install)}` failed:\n{result.stderr[-2000:]}", "install prometheus by hand")
    return binary_path()


def config_path(settings: Settings) -> Path:
    return settings.EO_STATE_DIR / "prometheus" / "prometheus.yml"


def configuration(settings: Settings, targets: dict[str, str]) -> dict[str, object]:
    """Every platform process is a target; its name is the `process` label; the alert rules loaded."""
    interval = f"{settings.PROMETHEUS_SCRAPE_INTERVAL_SECONDS:g}s"
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [
            {
                "job_name": "platform",
                "static_configs": [
                    {"targets": [address], "labels": {"process": name}} for name, address in sorted(targets.items())
                ],
            }
        ],
    }


def write_config(settings: Settings, targets: dict[str, str]) -> Path:
    path = config_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "# Written by `make up` (infra/launcher/prometheus_server.py) from the processes it supervises.\n"
        + yaml.safe_dump(configuration(settings, targets), sort_keys=False)
    )
    return path


def command(settings: Settings) -> list[str]:
    data = settings.EO_STATE_DIR / "prometheus" / "data"
    return [
        binary_path(),
        f"--config.file={config_path(settings)}",
        f"--storage.tsdb.path={data}",
        "--storage.tsdb.retention.time=2d",
        f"--web.listen-address=127.0.0.1:{settings.PROMETHEUS_PORT}",
        "--log.level=warn",
    ]
