"""`make soak DURATION=600 RATE=10 COUNT=100000`: orders placed continuously while a chaos schedule
crashes every process at every named point, rewinds consumer groups, republishes duplicates,
restarts Kafka and PostgreSQL and makes the provider time out after charging; then quiescence and
the auditor. Exits 1 unless nothing was lost or doubled and every order finished."""

from __future__ import annotations

import argparse
import sys

from services.settings import Settings
from soak.run import Soak, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=120, help="seconds of load and chaos")
    parser.add_argument("--rate", type=float, default=8, help="orders a second")
    parser.add_argument("--count", type=int, default=1_000_000, help="stop the load after this many orders")
    arguments = parser.parse_args(argv)
    if arguments.duration <= 0 or arguments.rate <= 0 or arguments.count <= 0:
        parser.error("duration, rate and count must be positive")
    report = Soak(Settings()).run(arguments.duration, arguments.rate, arguments.count)
    for line in summary(report):
        print(line)
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
