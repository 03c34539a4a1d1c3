"""One settings base per process kind, and no read of the environment outside it.

Every process's settings derive from `effectively_once.process.ProcessSettings` (which holds
the Kafka principal and the Host names it answers); the platform's tools read
`services.settings.Settings`. Nothing else reads an environment variable by hand: what a
process is configured with is in one place, validated, and listed in .env.example.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from services.settings import PROJECT_ROOT

PACKAGES = (
    "effectively_once",
    "services",
    "chaos_panel",
    "auditor",
    "outbox_relay",
    "infra",
    "labs",
    "soak",
    "benchmarks",
    "workbench",
    "dashboards",
)
DIRECT_SETTINGS = {
    "effectively_once/kafka_client.py": {"KafkaCredentials"},
    "effectively_once/kafka_requests.py": {"KafkaStatistics"},
    "effectively_once/request_checks.py": {"HostSettings"},
    "services/settings.py": {"Settings"},
}
"""The only classes built on pydantic-settings' BaseSettings itself: the three parts ProcessSettings
is made of, and the platform's tools' Settings. Every other settings class derives from these."""
READS_ALLOWED = {
    "services/settings.py": "the cache directory's default follows XDG_CACHE_HOME, inside the settings",
    "effectively_once/contract/running.py": "passes its own PATH, HOME and Kafka principal to the process under test",
}


def _environment_reads(source: str) -> list[int]:
    """Lines where `source` reads the environment: `os.environ` or `os.getenv` used other than
    to pass the whole environment on (`**os.environ`, `os.environ.items()`) or to write it
    (`os.environ.update(…)`)."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os"):
            continue
        if node.attr == "getenv":
            found.append(node.lineno)
        if node.attr != "environ":
            continue
        parent = parents.get(node)
        passed_on = isinstance(parent, ast.Dict) and None in parent.keys and node in parent.values
        copied_or_written = isinstance(parent, ast.Attribute) and parent.attr in ("items", "update", "copy")
        if not (passed_on or copied_or_written):
            found.append(node.lineno)
    return found


def _modules() -> list[Path]:
    return [path for package in PACKAGES for path in sorted((PROJECT_ROOT / package).rglob("*.py"))]


def test_no_module_reads_the_environment_outside_the_settings() -> None:
    modules = _modules()
    assert len(modules) > 200
    found = []
    for path in modules:
        relative = str(path.relative_to(PROJECT_ROOT))
        lines = _environment_reads(path.read_text())
        if lines and relative not in READS_ALLOWED:
            found.append(f"{relative}: line(s) {', '.join(map(str, lines))}")
    assert not found, "read the environment through a settings class instead:\n" + "\n".join(found)


def test_every_settings_class_is_built_on_the_one_base_of_its_kind() -> None:
    found: dict[str, set[str]] = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                (isinstance(base, ast.Name) and base.id == "BaseSettings")
                or (isinstance(base, ast.Attribute) and base.attr == "BaseSettings")
                for base in node.bases
            ):
                found.setdefault(str(path.relative_to(PROJECT_ROOT)), set()).add(node.name)
    assert found == DIRECT_SETTINGS


@pytest.mark.parametrize(
    "source",
    [
        "import os\nurl = os.environ['DATABASE_URL']",
        "import os\nurl = os.environ.get('DATABASE_URL', '')",
        "import os\nurl = os.getenv('DATABASE_URL')",
        "import os\nwanted = 'RELAY' in os.environ",
    ],
)
def test_the_check_sees_each_way_of_reading_the_environment(source: str) -> None:
    assert _environment_reads(source)


@pytest.mark.parametrize(
    "source",
    [
        "import os\nchild = {**os.environ, 'LANG': 'C'}",
        "import os\nchild = {k: v for k, v in os.environ.items() if k != 'SECRET'}",
        "import os\nos.environ.update({'KAFKA_USERNAME': 'operator'})",
    ],
)
def test_the_check_lets_a_child_process_inherit_the_environment(source: str) -> None:
    assert not _environment_reads(source)
