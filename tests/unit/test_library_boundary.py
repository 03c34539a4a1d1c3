"""The runtime is a library: nothing in `effectively_once` imports the demo or a dependency the
distribution does not declare, and the correct path stays short enough to read alone."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import effectively_once
from services.settings import PROJECT_ROOT

LIBRARY = Path(effectively_once.__file__).parent
DECLARED_IMPORTS = {
    "confluent_kafka",
    "psycopg",
    "psycopg_pool",
    "prometheus_client",
    "pydantic",
    "pydantic_settings",
    "httpx",
}
"""The import names of the distribution's dependencies (pyproject.toml [project] dependencies)."""


def _absolute_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_no_module_of_the_library_imports_anything_outside_it_but_its_declared_dependencies() -> None:
    modules = sorted(LIBRARY.rglob("*.py"))
    assert len(modules) > 20
    for module in modules:
        outside = _absolute_imports(module) - sys.stdlib_module_names - DECLARED_IMPORTS - {"__future__"}
        assert not outside, f"{module.relative_to(LIBRARY)} imports {sorted(outside)}"


def test_the_declared_import_names_are_the_distributions_dependencies() -> None:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    names = {
        dependency.split("[")[0].split(">")[0].split("=")[0].replace("-", "_") for dependency in project["dependencies"]
    }
    assert names | {"psycopg_pool"} == DECLARED_IMPORTS | {"prometheus_client"}
    assert "effectively_once" in project["scripts"]["effectively-once-relay"]


def test_the_correct_path_is_one_module_of_at_most_200_lines() -> None:
    lines = (LIBRARY / "correct_path.py").read_text().count("\n")
    assert lines <= 200, lines


def test_the_library_names_no_demo_role_in_its_migrations() -> None:
    for migration in (LIBRARY / "migrations").glob("*.sql"):
        text = migration.read_text().lower()
        assert "grant" not in text and "outbox_relay" not in text, migration.name


def test_the_version_is_the_distributions() -> None:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    assert effectively_once.__version__ == project["version"]


def _package_imports(path: Path) -> set[str]:
    """The package's own modules a module imports (relative imports, by module name)."""
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            found |= {node.module.split(".")[0]} if node.module else {alias.name for alias in node.names}
    return found


def test_one_messages_path_from_poll_to_stored_offset_is_three_files_free_of_teaching_and_lab_code() -> None:
    loop, processor, path = (
        _package_imports(LIBRARY / f"{m}.py") for m in ("consumer_loop", "processor", "correct_path")
    )
    assert "processor" in loop and "correct_path" in processor
    for imports in (loop, processor, path):
        assert not imports & {"teaching", "lab_controls", "control", "runner"}, imports
    assert path <= {"envelope", "outcomes"}, path  # the correct path needs nothing else of the runtime
