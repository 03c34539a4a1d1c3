"""The runtime as a team gets it: the wheel built from this repository, installed into a clean
virtual environment outside the repository together with examples/loyalty-points, whose own tests
(the contract suite on its own schema) then run against the real PostgreSQL and Kafka.

The built artifacts are checked with twine on the way; the example's schema is created with the
wheel's own console command, `effectively-once-migrate`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

from effectively_once import contract
from services.settings import PROJECT_ROOT, Settings, with_credentials

EXAMPLE = PROJECT_ROOT / "examples" / "loyalty-points"
DATABASE = "loyalty_example"


def _uv(settings: Settings) -> str:
    found = settings.EO_CACHE_DIR / "tools" / "bin" / "uv"
    return str(found) if found.exists() else shutil.which("uv") or pytest.fail("uv is missing: run `make venv`")


def _run(command: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (
        f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    )
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory, settings: Settings) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    version = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["version"]
    _run([_uv(settings), "build", "--out-dir", str(dist), "--quiet"], PROJECT_ROOT)
    artifacts = sorted([*dist.glob("*.whl"), *dist.glob("*.tar.gz")])
    assert [a.name for a in artifacts] == [
        f"effectively_once-{version}-py3-none-any.whl",
        f"effectively_once-{version}.tar.gz",
    ]
    _run([sys.executable, "-m", "twine", "check", "--strict", *map(str, artifacts)], PROJECT_ROOT)
    [built] = [a for a in artifacts if a.suffix == ".whl"]
    with zipfile.ZipFile(built) as archive:
        names = archive.namelist()
    assert all(n.startswith(("effectively_once/", "effectively_once-")) for n in names), names
    assert "effectively_once/migrations/0004_marker_retention.sql" in names
    assert "effectively_once/py.typed" in names
    return built


@pytest.fixture(scope="module")
def example_database(settings: Settings) -> Iterator[str]:
    with psycopg.connect(settings.admin_database_url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DATABASE)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
    admin_url = settings.admin_database_url
    parts = urlsplit(admin_url)
    yield with_credentials(admin_url, parts.username or "postgres", parts.password or "", DATABASE)


def test_the_built_wheel_installed_outside_the_repository_passes_the_example_services_contract_suite(
    wheel: Path, example_database: str, settings: Settings, tmp_path: Path
) -> None:
    service = tmp_path / "loyalty-points"
    shutil.copytree(EXAMPLE, service, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", ".pytest_cache"))
    venv = tmp_path / "venv"
    uv = _uv(settings)
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")}
    _run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], tmp_path, clean)
    python = str(venv / "bin" / "python")
    _run(
        [uv, "pip", "install", "--quiet", "--python", python, "--find-links", str(wheel.parent), f"{service}[test]"],
        tmp_path,
        clean,
    )
    located = _run([python, "-c", "import effectively_once; print(effectively_once.__file__)"], tmp_path, clean)
    assert str(venv) in located and str(PROJECT_ROOT) not in located, located

    environment = clean | {
        "DATABASE_URL": example_database,
        "KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers,
    }
    migrate = str(venv / "bin" / "effectively-once-migrate")
    first = _run(
        [migrate, "--own", f"loyalty_points={service / 'loyalty_points' / 'migrations'}"], service, environment
    )
    assert "runtime/0001_processed_message.sql" in first and "loyalty_points/0001_points.sql" in first, first
    again = _run(
        [migrate, "--own", f"loyalty_points={service / 'loyalty_points' / 'migrations'}"], service, environment
    )
    assert "0 migration(s) applied" in again, again

    report = _run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider"], service, environment, timeout=900)
    scenarios = len(contract.SCENARIOS)
    assert f"{scenarios + 1} passed" in report and "skipped" not in report and "failed" not in report, report
