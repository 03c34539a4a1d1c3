"""Every module a platform process imports is loaded from bytecode `make venv` compiled, even where
PYTHONDONTWRITEBYTECODE keeps imports from caching it (as on CI): otherwise each process started
compiles its modules again, about 0.4 s of CPU of a service's start (README, "make test")."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from services.settings import PROJECT_ROOT

ENTRY_POINTS = (
    "services.orders.__main__",  # an HTTP service: FastAPI, uvicorn, psycopg_pool
    "services.payment.__main__",  # a consumer: confluent_kafka, psycopg, pydantic-settings
    "services.payment.executor",  # remote calls: httpx
    "outbox_relay.__main__",
    "chaos_panel.__main__",
    "infra.launcher.__main__",
    "soak.__main__",
)

PROBE = """
import importlib._bootstrap_external as external, json, sys
compiled = []
plain = external.SourceLoader.source_to_code
def recorded(self, data, path, *args, **kwargs):
    compiled.append(str(path))
    return plain(self, data, path, *args, **kwargs)
external.SourceLoader.source_to_code = recorded
import importlib
importlib.import_module(sys.argv[1])
print(json.dumps(compiled))
"""


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_a_process_compiles_nothing_at_its_start(module: str) -> None:
    environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(PROJECT_ROOT)}
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, module],
        cwd=PROJECT_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert probe.returncode == 0, probe.stderr
    compiled = json.loads(probe.stdout.strip().splitlines()[-1])
    assert compiled == [], f"{module} compiled {len(compiled)} module(s) at import (run make venv): {compiled[:5]}"
