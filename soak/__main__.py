"""`make soak DURATION=600 RATE=8 SEED=3`: orders placed continuously while a chaos schedule
crashes every process at every named point (pass after pass), rewinds consumer groups,
republishes duplicates, restarts Kafka (on three nodes: kills partition leaders, freezes a node,
restarts the controller) and PostgreSQL and makes the provider time out after charging; then
quiescence and the auditor. Exits 1 unless nothing was lost or doubled and every order finished."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from services.operator import act_as_operator
from services.settings import PROJECT_ROOT, Settings
from soak.run import HISTORY, Soak, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=120, help="seconds of load and chaos")
    parser.add_argument("--rate", type=float, default=8, help="orders a second")
    parser.add_argument("--count", type=int, default=1_000_000, help="stop the load after this many orders")
    parser.add_argument("--seed", type=int, default=17, help="the schedule's order and choices: same seed, same plan")
    parser.add_argument(
        "--crashes", type=int, help="at least this many crash steps (default: one every 1.2 s of the chaos window)"
    )
    parser.add_argument(
        "--leader-kills", type=int, help="partition leaders killed on three nodes (default: one per 100 s, at least 2)"
    )
    parser.add_argument(
        "--history",
        type=Path,
        default=HISTORY,
        help=f"where to write the history the checker judges (default: {HISTORY.relative_to(PROJECT_ROOT)})",
    )
    arguments = parser.parse_args(argv)
    if arguments.duration <= 0 or arguments.rate <= 0 or arguments.count <= 0:
        parser.error("duration, rate and count must be positive")
    crashes = arguments.crashes if arguments.crashes is not None else int(arguments.duration * 0.7 / 1.2)
    leader_kills = (
        arguments.leader_kills if arguments.leader_kills is not None else max(2, int(arguments.duration // 100))
    )
    if crashes < 0 or leader_kills < 0:
        parser.error("crashes and leader kills cannot be negative")
    settings = Settings()
    act_as_operator(settings)
    soak = Soak(
        settings, seed=arguments.seed, crashes=crashes, leader_kills=leader_kills, history_path=arguments.history
    )
    report = soak.run(arguments.duration, arguments.rate, arguments.count)
    for line in summary(report):
        print(line)
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
