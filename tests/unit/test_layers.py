"""One direction of imports: entry points above the services, the services above the library.

From the top down, each layer imports only layers below it, never one beside it or above it:

    benchmarks → workbench → soak → infra → chaos_panel → labs → auditor, dashboards
      → outbox_relay → services → effectively_once

Inside `services/`, a service's package imports no other service's, and a shared module (a file
directly under `services/`) imports no service's package. `tests` is above everything; nothing
else imports it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from services.settings import PROJECT_ROOT
from tests.support.imports import imported_modules

LAYERS: list[set[str]] = [
    {"benchmarks"},
    {"workbench"},
    {"soak"},
    {"infra"},
    {"chaos_panel"},
    {"labs"},
    {"auditor", "dashboards"},
    {"outbox_relay"},
    {"services"},
    {"effectively_once"},
]
LEVEL = {package: level for level, packages in enumerate(LAYERS) for package in packages}
SERVICE_PACKAGES = {p.name for p in (PROJECT_ROOT / "services").iterdir() if (p / "__init__.py").exists()}


def violations(source: str, module: str) -> list[str]:
    """What `source`, the text of dotted `module`, imports against the layering."""
    own = module.split(".")[0]
    found = []
    for name in sorted(imported_modules(source, module)):
        target = name.split(".")[0]
        if target == "tests" and own != "tests":
            found.append(f"{module} imports {name}: tests.support is the tests' alone")
        elif target in LEVEL and own in LEVEL and target != own and LEVEL[target] <= LEVEL[own]:
            way = "beside it" if LEVEL[target] == LEVEL[own] else "above it"
            found.append(f"{module} imports {name}, a layer {way}")
        elif own == "services" and target == "services":
            parts, mine = name.split("."), module.split(".")
            theirs = parts[1] if len(parts) > 1 and parts[1] in SERVICE_PACKAGES else None
            ours = mine[1] if len(mine) > 2 and mine[1] in SERVICE_PACKAGES else None
            if theirs is not None and theirs != ours:
                who = f"the service {ours}" if ours else "a shared module"
                found.append(f"{module} ({who}) imports {name}, the service {theirs}'s")
    return found


def _modules() -> list[tuple[Path, str]]:
    found = []
    for package in LEVEL:
        for path in sorted((PROJECT_ROOT / package).rglob("*.py")):
            dotted = ".".join(path.relative_to(PROJECT_ROOT).with_suffix("").parts).removesuffix(".__init__")
            found.append((path, dotted if path.name != "__init__.py" else dotted + ".__init__"))
    return found


def test_every_package_of_the_repository_has_its_layer() -> None:
    packages = {p.parent.name for p in PROJECT_ROOT.glob("*/__init__.py")} - {"tests"}
    assert packages == set(LEVEL), packages ^ set(LEVEL)


def test_no_module_imports_a_layer_above_or_beside_its_own_nor_another_service() -> None:
    modules = _modules()
    assert len(modules) > 200
    found = [problem for path, dotted in modules for problem in violations(path.read_text(), dotted)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("module", "line"),
    [
        ("services.orders.api", "from chaos_panel.web import app"),  # upward
        ("effectively_once.consumer.loop", "import services.topology"),  # upward, from the library
        ("auditor.invariants", "from dashboards import build"),  # sideways
        ("labs.catalog", "from chaos_panel.reading import records"),  # upward
        ("services.inventory.handlers", "from services.payment import handlers"),  # another service
        ("services.topology", "from services.orders.saga import apply"),  # a shared module, a service
        ("benchmarks.consumer_throughput", "from tests.support.ledger import entry"),  # the tests' own
        ("chaos_panel.web.pages", "import soak.run"),  # upward, named as a plain import
    ],
)
def test_the_check_refuses_each_kind_of_wrong_import(module: str, line: str) -> None:
    assert violations(line, module), line


@pytest.mark.parametrize(
    ("module", "line"),
    [
        ("chaos_panel.web.pages", "from labs.catalog import LABS"),
        ("services.inventory.handlers", "from services.topology import consumer"),
        ("services.inventory.handlers", "from services.inventory import stock"),
        ("soak.run", "from auditor.invariants import audit"),
        ("effectively_once.consumer.loop", "from ..envelope import decode"),
    ],
)
def test_the_check_lets_downward_imports_through(module: str, line: str) -> None:
    assert not violations(line, module), line
