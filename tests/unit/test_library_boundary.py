"""The runtime is a library: nothing in `effectively_once` imports the demo or a dependency the
distribution does not declare, and one message's path stays free of teaching and lab code."""

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
CONTRACT_EXTRA = {"hypothesis"}
"""What the contract suite needs beyond them: the `contract` extra (pip install effectively-once[contract])."""


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
        allowed = DECLARED_IMPORTS | (CONTRACT_EXTRA if module.parent.name == "contract" else set())
        outside = _absolute_imports(module) - sys.stdlib_module_names - allowed - {"__future__"}
        assert not outside, f"{module.relative_to(LIBRARY)} imports {sorted(outside)}"


def test_the_contract_suite_imports_its_extra_only_where_a_property_runs() -> None:
    """`from effectively_once import contract` works without the extra; only the properties need it."""
    for module in sorted((LIBRARY / "contract").glob("*.py")):
        tree = ast.parse(module.read_text(), str(module))
        top_level = {
            node.module.split(".")[0] if isinstance(node, ast.ImportFrom) and node.module else ""
            for node in tree.body
            if isinstance(node, ast.ImportFrom | ast.Import)
        } | {alias.name.split(".")[0] for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
        if module.name != "copies.py":  # imported by the properties themselves, when they run
            assert not top_level & CONTRACT_EXTRA, f"{module.name} imports the contract extra at import time"


def test_the_declared_import_names_are_the_distributions_dependencies() -> None:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    names = {
        dependency.split("[")[0].split(">")[0].split("=")[0].replace("-", "_") for dependency in project["dependencies"]
    }
    assert names | {"psycopg_pool"} == DECLARED_IMPORTS | {"prometheus_client"}
    assert "effectively_once" in project["scripts"]["effectively-once-relay"]
    extra = {dependency.split(">")[0] for dependency in project["optional-dependencies"]["contract"]}
    assert extra == CONTRACT_EXTRA


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
