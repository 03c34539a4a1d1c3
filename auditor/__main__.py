"""`python -m auditor` (`make audit`): the verdict, the dead letters and what Kafka holds against
the databases (kafka_side.py: lost and phantom events), printed; exit 1 on any anomaly, or when
Kafka could not be read."""

from __future__ import annotations

import sys

from confluent_kafka import KafkaException

from services.operator import act_as_operator
from services.settings import Settings
from services.topology import database

from . import kafka_side
from .dead_letters import dead_letter_report, read_dead_letters
from .invariants import audit, database_reader, report


def main() -> int:
    settings = Settings()
    act_as_operator(settings)
    query = database_reader(lambda name: settings.auditor_database_url(database(name)))
    verdict = audit(query)
    for line in report(verdict):
        print(line)
    try:
        letters = read_dead_letters(settings.kafka_bootstrap_servers)
        for line in dead_letter_report(letters):
            print(line)
        side = kafka_side.check(query, settings.kafka_bootstrap_servers, letters)
    except (KafkaException, TimeoutError) as error:
        print(f"KAFKA: could not be read ({error})")
        return 1
    for line in kafka_side.report(side):
        print(line)
    return 0 if verdict.green and side.clean else 1


if __name__ == "__main__":
    sys.exit(main())
