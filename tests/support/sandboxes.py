"""The payment-provider and mail sandboxes as real processes, for the integration tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from services.settings import PROJECT_ROOT
from tests.support.waiting import wait_for
from workbench.network import free_port

ADMIN_PASSWORD = "sandbox-admin-test-password"
"""What the sandboxes run by the tests take for their /admin/faults (the tests' clients send it)."""


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def running(module: str, database_url: str, host_variable: str, port_variable: str) -> Iterator[str]:
    """Run `python -m module` on a free port; yield its base URL; stop it afterwards."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", module],
        cwd=PROJECT_ROOT,
        env={
            **os.environ,
            "PYTHONPATH": str(PROJECT_ROOT),
            "DATABASE_URL": database_url,
            host_variable: "127.0.0.1",
            port_variable: str(port),
            "SANDBOX_ADMIN_PASSWORD": ADMIN_PASSWORD,
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(f"{url}/healthz") or process.poll() is not None, 30, f"{module} to answer")
        assert process.poll() is None, f"{module} exited with {process.returncode}"
        yield url
    finally:
        process.terminate()
        process.wait(10)
