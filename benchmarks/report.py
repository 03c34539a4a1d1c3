"""The pages `make bench` writes from its results (artifacts/bench/bench.json): every row in
docs/benchmarks.md, and the headline figures in the README between its two bench markers.
Figures are never typed by hand: `python -m benchmarks.report` writes both pages again from the
last run's JSON."""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.rows import RESULTS, Row
from services.settings import PROJECT_ROOT

PAGE = PROJECT_ROOT / "docs" / "benchmarks.md"
README = PROJECT_ROOT / "README.md"
START, END = "<!-- make bench: headline figures -->", "<!-- /make bench -->"
HEADLINE = (
    ("consumer", "correct"),
    ("consumer", "batched 100"),
    ("consumer", "duplicate path"),
    ("relay", "throughput"),
    ("relay", "latency p99"),
    ("saga", "order latency p99"),
    ("saga", "sustainable rate, REPLICAS=1"),
    ("saga", "p99 at 80 % of it"),
    ("postgres", "commit p50, one server"),
    ("postgres", "commit p50, synchronous standby"),
    ("postgres", "failover: standby promoted"),
)
"""(section, case) of the rows the README shows, in this order; a row the run lacks is left out."""


def load(path: Path = RESULTS / "bench.json") -> tuple[list[Row], dict[str, str]]:
    """The rows of a run and what is known of it (when, where), from its JSON."""
    document = json.loads(path.read_text())
    if isinstance(document, list):  # a run from before the JSON carried its own facts
        return [Row(**row) for row in document], {}
    return [Row(**row) for row in document["rows"]], dict(document.get("run", {}))


def run_facts() -> dict[str, str]:
    """When and where this run happened, as the pages name it."""
    machine = f"{os.cpu_count()} cores, {platform.system()} {platform.machine()}"
    return {
        "finished": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{machine}, Python {platform.python_version()}",
    }


def _value(row: Row) -> str:
    return f"{row.value:,.2f}" if abs(row.value) < 10 else f"{row.value:,.0f}"


def _verdict(row: Row) -> str:
    return "" if row.met is None else ("met" if row.met else "**not met**")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def page(rows: Sequence[Row], facts: dict[str, str]) -> str:
    """docs/benchmarks.md: every row, by section, with its target and whether this run met it."""
    when = facts.get("finished", "an earlier run")
    where = facts.get("machine", "")
    lines = [
        "# Benchmarks: the last `make bench`",
        "",
        f"Written by `make bench` ({when}{'; ' + where if where else ''}) from `artifacts/bench/bench.json`;",
        "do not edit it by hand. `python -m benchmarks.report` writes it again from that file. On these",
        "noisy machines absolute figures move by a quarter from one run to the next: compare the ratios",
        "measured in one run. [performance.md](performance.md) reads earlier runs and their profiles.",
        "",
    ]
    missed = [row for row in rows if row.met is False]
    lines.append(
        "Every target was met in this run."
        if not missed
        else "Targets not met in this run: " + ", ".join(f"{row.section} / {row.case}" for row in missed) + "."
    )
    for section in dict.fromkeys(row.section for row in rows):
        lines += [
            "",
            f"## {section}",
            "",
            "| case | value | unit | target | | detail |",
            "| --- | ---: | --- | --- | --- | --- |",
        ]
        for row in (r for r in rows if r.section == section):
            cells = (row.case, _value(row), row.unit, row.target, _verdict(row), row.detail)
            lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def headline(rows: Sequence[Row], facts: dict[str, str]) -> str:
    """The README's block: the headline rows, and where the rest is."""
    by_case = {(row.section, row.case): row for row in rows}
    chosen = [by_case[key] for key in HEADLINE if key in by_case]
    lines = [
        START,
        f"From the last `make bench` ({facts.get('finished', 'an earlier run')}); every figure, with its target, is",
        "in [docs/benchmarks.md](docs/benchmarks.md).",
        "",
        "| | figure | target |",
        "| --- | ---: | --- |",
    ]
    for row in chosen:
        target = f"{row.target} ({_verdict(row)})" if row.target else ""
        lines.append(f"| {row.section}: {_cell(row.case)} | {_value(row)} {row.unit} | {_cell(target)} |")
    return "\n".join([*lines, END])


def with_headline(readme: str, block: str) -> str:
    """`readme` with its block between the bench markers replaced by `block`; ValueError if the
    markers are not there once each, in order."""
    start, end = readme.find(START), readme.find(END)
    if start < 0 or end < start or readme.count(START) != 1 or readme.count(END) != 1:
        raise ValueError(f"the README needs one {START!r} and, after it, one {END!r}")
    return readme[:start] + block + readme[end + len(END) :]


def write(rows: Sequence[Row], facts: dict[str, str]) -> list[Path]:
    """Write docs/benchmarks.md and the README's headline block; the paths written."""
    PAGE.write_text(page(rows, facts))
    README.write_text(with_headline(README.read_text(), headline(rows, facts)))
    return [PAGE, README]


def main() -> int:
    path = RESULTS / "bench.json"
    if not path.exists():
        print(f"{path.relative_to(PROJECT_ROOT)} is not there: run `make bench` first")
        return 2
    rows, facts = load(path)
    for written in write(rows, facts):
        print(f"wrote {written.relative_to(PROJECT_ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
