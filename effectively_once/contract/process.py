"""`python -m effectively_once.contract.process NAME TOPIC DEAD_LETTER_TOPIC module:HANDLERS`:
a team's handlers in a real consumer process, configured by the runtime's own environment
variables (EO_FAULTS arms the crash the contract suite asks for)."""

from __future__ import annotations

import importlib
import sys

from ..consumer import wiring


def main(argv: list[str]) -> None:
    if len(argv) != 4:
        raise SystemExit("usage: python -m effectively_once.contract.process NAME TOPIC DLQ module:HANDLERS")
    name, topic, dead_letters, handlers = argv
    module, _, attribute = handlers.partition(":")
    wiring.run(name, (topic,), getattr(importlib.import_module(module), attribute), dead_letter_topic=dead_letters)


if __name__ == "__main__":
    main(sys.argv[1:])
