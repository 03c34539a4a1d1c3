"""The pages on each stack (docs/stacks/) point at the lines that arrange its transaction and its
acknowledgement: every [`snippet`](file#Lnn) link must land on a line that still holds the snippet,
so an edit that moves the code fails here instead of leaving the page pointing at the wrong line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from services.settings import PROJECT_ROOT

PAGES = sorted((PROJECT_ROOT / "docs" / "stacks").glob("*.md"))
CITATION = re.compile(r"\[`([^`]+)`\]\(([^)#]+)#L(\d+)\)")


def _citations(page: Path) -> list[tuple[str, Path, int]]:
    return [
        (snippet, (page.parent / target).resolve(), int(line))
        for snippet, target, line in CITATION.findall(page.read_text())
    ]


def test_every_stack_has_a_page_that_cites_its_code() -> None:
    assert {page.name for page in PAGES} >= {"README.md", "java.md", "node.md"}
    for name in ("java.md", "node.md"):
        assert len(_citations(PROJECT_ROOT / "docs" / "stacks" / name)) >= 10


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_each_cited_line_still_holds_what_the_page_quotes(page: Path) -> None:
    for snippet, source, line in _citations(page):
        lines = source.read_text().splitlines()
        assert 0 < line <= len(lines), f"{page.name}: {source.name} has no line {line}"
        assert snippet in lines[line - 1], (
            f"{page.name}: {source.name}:{line} is {lines[line - 1].strip()!r}, not {snippet!r}"
        )
