"""`python -m auditor` (`make audit`): the verdict and the dead letters, printed; exit 1 on any
anomaly, or when the dead letters could not be read."""

from __future__ import annotations

import sys

from confluent_kafka import KafkaException

from services.operator import act_as_operator
from services.settings import Settings
from services.topology import database

from .dead_letters import dead_letter_report, read_dead_letters
from .invariants import audit, database_reader, report


def main() -> int:
    settings = Settings()
    act_as_operator(settings)
    verdict = audit(database_reader(lambda name: settings.auditor_database_url(database(name))))
    for line in report(verdict):
        print(line)
    try:
        for line in dead_letter_report(read_dead_letters(settings.kafka_bootstrap_servers)):
            print(line)
    except (KafkaException, TimeoutError) as error:
        print(f"DEAD LETTERS: could not be read ({error})")
        return 1
    return 0 if verdict.green else 1


if __name__ == "__main__":
    sys.exit(main())
