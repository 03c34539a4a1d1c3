"""The contract suite in black-box mode, on the inventory-reservation consumer in each of its
implementations: driven only through Kafka, its database and its control endpoint
(docs/consumer-process-contract.md). The same scenarios, the same assertions, three stacks."""

from __future__ import annotations

import sys

import pytest

from effectively_once import contract
from effectively_once.envelope import Envelope
from services.settings import PROJECT_ROOT, Settings
from tests.integration.conftest import service_schema
from tests.integration.test_contract_suite import UNDECLARED, _placed, _units_reserved
from tests.support.stacks import node_inventory_command

IMPLEMENTATIONS = ("python", "node")


def _command(implementation: str) -> list[str]:
    if implementation == "python":
        return [sys.executable, "-m", "services.inventory"]
    if implementation == "node":
        return node_inventory_command()
    raise ValueError(implementation)


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def inventory_process(request: pytest.FixtureRequest, runtime_db: str, settings: Settings) -> contract.ProcessSubject:
    return contract.ProcessSubject(
        database_url=service_schema(runtime_db, "inventory", as_url=True),
        bootstrap_servers=settings.kafka_bootstrap_servers,
        command=_command(request.param),
        cwd=PROJECT_ROOT,
        environment={"PYTHONPATH": str(PROJECT_ROOT)},
        make_event=_placed,
        effects=_units_reserved,
        same_fact=lambda event: Envelope.new(event.type, event.key, event.payload),
    )


@pytest.mark.parametrize("scenario", [s for s in contract.BLACK_BOX_SCENARIOS if s.name not in UNDECLARED], ids=str)
def test_the_inventory_process_keeps_the_contract_from_outside(
    inventory_process: contract.ProcessSubject, scenario: contract.BlackBoxScenario
) -> None:
    scenario.run(inventory_process)
