"""A real consumer process for tests: `python -m tests.support.ledger_consumer NAME TOPIC DLQ`.

Configured by the runtime's own environment variables (DATABASE_URL, KAFKA_BOOTSTRAP_SERVERS,
CONSUMER_STRATEGY, EO_FAULTS, ...), so an armed crash is a real exit of a real process.
"""

from __future__ import annotations

import sys

from effectively_once import lab
from effectively_once.consumer import wiring
from workbench.ledger import LEDGER_ENTRY, ledger_handler


def main() -> None:
    consumer_name, topic, dead_letter_topic = sys.argv[1:4]
    wiring.run(
        consumer_name,
        (topic,),
        {LEDGER_ENTRY: ledger_handler(consumer_name)},
        dead_letter_topic=dead_letter_topic,
        paths=lab.PATHS,
        attach=lab.attach,
    )


if __name__ == "__main__":
    main()
