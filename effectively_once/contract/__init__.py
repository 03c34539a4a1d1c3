"""The contract suite: the idempotent-consumer pattern's scenarios, run on a team's own handler
and schema against real PostgreSQL and Kafka.

A team describes its consumer once, as a `Subject`, and runs every scenario from its own tests::

    from effectively_once import contract

    SUBJECT = contract.Subject(
        database_url=..., bootstrap_servers=...,
        handlers="my_service.handlers:HANDLERS",
        make_event=lambda key: Envelope.new("OrderPlaced", key, {...}),
        effects=lambda connection, event: ...,  # how often the event's effect is in your tables
    )

    @pytest.mark.parametrize("scenario", contract.SCENARIOS, ids=str)
    def test_contract(scenario):
        scenario.run(SUBJECT)

Each scenario raises `ContractViolation` (an AssertionError) saying what it saw, or `NotDeclared`
when the subject does not declare what the scenario needs (a semantic duplicate, an order of
events): skip those, or declare them. Every run uses consumer names, keys and topics of its own,
so the suite can run against a database and a cluster other tests use.

`BLACK_BOX_SCENARIOS` are the same scenarios for a consumer process in any language, described
as a `ProcessSubject` (the command that starts it): they drive it only through Kafka, its
database and its control endpoint, as docs/consumer-process-contract.md specifies.
"""

from __future__ import annotations

from .black_box import BLACK_BOX_SCENARIOS, BlackBoxScenario
from .process_subject import ProcessSubject
from .scenarios import SCENARIOS, ContractViolation, NotDeclared, Scenario
from .subject import Subject

__all__ = [
    "BLACK_BOX_SCENARIOS",
    "SCENARIOS",
    "BlackBoxScenario",
    "ContractViolation",
    "NotDeclared",
    "ProcessSubject",
    "Scenario",
    "Subject",
]
