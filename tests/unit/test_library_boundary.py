"""The runtime is a library: nothing in `effectively_once` imports the demo or a dependency the
distribution does not declare, and one message's path stays free of teaching and lab code."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import pytest

import effectively_once
from services.settings import PROJECT_ROOT
from tests.support.imports import imported_modules

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


def _names_the_lab(source: str, module: str) -> bool:
    lab = "effectively_once.lab"
    return any(name == lab or name.startswith(lab + ".") for name in imported_modules(source, module))


def test_the_consumer_package_imports_nothing_from_the_lab() -> None:
    """Teaching paths and lab controls are plugged in from outside (wiring.run's `paths` and
    `attach`): the path a production consumer runs carries none of them."""
    modules = sorted((LIBRARY / "consumer").glob("*.py"))
    assert {module.name for module in modules} >= {"loop.py", "processor.py", "transaction.py", "wiring.py"}
    for module in modules:
        dotted = "effectively_once.consumer." + module.stem
        assert not _names_the_lab(module.read_text(), dotted), f"{module.name} imports the lab"


@pytest.mark.parametrize(
    "line",
    [
        "from ..lab import teaching",
        "from ..lab.controls import LabControls",
        "from .. import lab",
        "import effectively_once.lab.teaching",
        "from effectively_once import lab",
        "from effectively_once.lab.strategy_store import load",
    ],
)
def test_the_lab_check_sees_each_way_of_naming_the_lab(line: str) -> None:
    assert _names_the_lab(line, "effectively_once.consumer.loop")


def test_the_lab_check_lets_the_rest_of_the_library_through() -> None:
    source = "from ..envelope import Envelope\nfrom .. import metrics, labels\nfrom .transaction import claim"
    assert not _names_the_lab(source, "effectively_once.consumer.loop")


def test_one_messages_path_from_poll_to_stored_offset_is_three_files_of_the_consumer_package() -> None:
    """loop.py polls, decodes and acknowledges; processor.py retries and records; transaction.py
    claims, runs the handler and commits. The transaction needs nothing else of the runtime."""
    consumer = LIBRARY / "consumer"
    loop, processor, transaction = (
        imported_modules((consumer / f"{m}.py").read_text(), f"effectively_once.consumer.{m}")
        for m in ("loop", "processor", "transaction")
    )
    assert "effectively_once.consumer.processor" in loop and "effectively_once.consumer.transaction" in processor
    own = {name for name in transaction if name.startswith("effectively_once.")}
    assert {name.rsplit(".", 1)[0] if name.count(".") > 1 else name for name in own} <= {
        "effectively_once.envelope",
        "effectively_once.outcomes",
    }, own
