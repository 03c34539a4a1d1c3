"""make bench writes its pages from its JSON: docs/benchmarks.md whole, the README's headline
block between its markers, and nothing else of the README."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import report
from benchmarks.rows import Row, write_json

ROWS = [
    Row("consumer", "correct", 1313.4, "msg/s", "≥ 1,000/s", True, "10,000 msgs | SQL-only 1,620/s", 1.3),
    Row("consumer", "batched 100", 9100.0, "msg/s", "≥ 0.9× SQL only", False, "ratio 0.75", 0.83),
    Row("relay", "latency p99", 24.0, "ms", "≤ 50 ms", True, "at 1,000 rows/s", 2.1),
    Row("saga", "sustainable rate, REPLICAS=1", 50.0, "orders/s", "≥ 100/s", False, "", 0.5),
    Row("growth", "by id time: applied claim p99", 0.88, "×"),
]
FACTS = {"finished": "2026-12-05 23:00 UTC", "machine": "2 cores"}


def test_the_page_holds_every_row_by_section_with_its_verdict() -> None:
    page = report.page(ROWS, FACTS)
    assert page.count("\n## ") == 4 and "2026-12-05 23:00 UTC" in page
    assert "| correct | 1,313 | msg/s | ≥ 1,000/s | met | 10,000 msgs \\| SQL-only 1,620/s |" in page
    assert "| batched 100 | 9,100 | msg/s | ≥ 0.9× SQL only | **not met** |" in page
    assert "| by id time: applied claim p99 | 0.88 | × |  |  |  |" in page
    assert "Targets not met in this run: consumer / batched 100, saga / sustainable rate, REPLICAS=1." in page


def test_the_headline_replaces_only_what_stands_between_the_markers() -> None:
    readme = f"# title\n\nbefore\n\n{report.START}\nold figures\n{report.END}\n\nafter\n"
    written = report.with_headline(readme, report.headline(ROWS, FACTS))
    assert written.startswith("# title\n\nbefore\n\n") and written.endswith("\n\nafter\n")
    assert "old figures" not in written
    assert "| consumer: correct | 1,313 msg/s | ≥ 1,000/s (met) |" in written
    assert "| saga: sustainable rate, REPLICAS=1 | 50 orders/s | ≥ 100/s (**not met**) |" in written
    assert "growth" not in written  # not a headline row
    assert report.with_headline(written, report.headline(ROWS, FACTS)) == written  # written again, the same


@pytest.mark.parametrize(
    "readme",
    ["no markers", f"{report.END}\n{report.START}", f"{report.START}\n{report.START}\n{report.END}"],
)
def test_a_readme_without_its_markers_once_each_in_order_is_refused(readme: str) -> None:
    with pytest.raises(ValueError, match="README needs"):
        report.with_headline(readme, "block")


def test_a_run_is_read_back_from_its_json_as_it_was_written(tmp_path: Path) -> None:
    path = write_json(ROWS, tmp_path / "bench.json", FACTS)
    assert report.load(path) == (ROWS, FACTS)


def test_the_readme_has_its_headline_block() -> None:
    text = report.README.read_text()
    assert text.count(report.START) == 1 and text.index(report.START) < text.index(report.END)
