"""The labs, their texts, their screenshots and the tests they cite stay in step."""

from __future__ import annotations

import re

import pytest

from labs.__main__ import main
from labs.catalog import LABS
from labs.lab import Lab
from services.settings import PROJECT_ROOT

WORKSHOP = PROJECT_ROOT / "docs" / "workshop"


def test_labs_are_numbered_in_order_with_unique_names() -> None:
    assert [lab.number for lab in LABS] == list(range(1, len(LABS) + 1))
    assert len({lab.name for lab in LABS}) == len(LABS)
    assert all(re.fullmatch(r"[a-z0-9-]+", lab.name) for lab in LABS)


@pytest.mark.parametrize("lab", LABS, ids=[lab.name for lab in LABS])
def test_each_lab_has_its_text_screenshot_and_command(lab: Lab) -> None:
    text = (PROJECT_ROOT / lab.doc).read_text()
    assert text.startswith(f"# {lab.number:02d} · {lab.title}\n"), text.splitlines()[0]
    for section in ("## Do it on the panel", "## What you should see", "## Why", "## What proves it"):
        assert section in text, section
    assert f"make lab NAME={lab.name}" in text
    image = lab.screenshot.removeprefix("docs/workshop/")
    assert f"]({image})" in text and (PROJECT_ROOT / lab.screenshot).is_file()


@pytest.mark.parametrize("lab", LABS, ids=[lab.name for lab in LABS])
def test_every_test_a_lab_cites_exists_and_its_text_names_it(lab: Lab) -> None:
    text = (PROJECT_ROOT / lab.doc).read_text()
    assert lab.proven_by
    for node in lab.proven_by:
        path, name = node.split("::")
        assert f"def {name}(" in (PROJECT_ROOT / path).read_text(), node
        assert node in text, f"{lab.doc} does not name {node}"
    for cited in re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", text):
        assert f"def {cited[1]}(" in (PROJECT_ROOT / cited[0]).read_text(), cited


def test_the_workshop_index_and_the_readme_list_every_lab() -> None:
    index = (WORKSHOP / "README.md").read_text()
    readme = (PROJECT_ROOT / "README.md").read_text()
    for lab in LABS:
        file = lab.doc.removeprefix("docs/workshop/")
        assert f"]({file})" in index and f"`{lab.name}`" in index, lab.name
        assert f"]({lab.doc})" in readme, lab.name


def test_the_command_lists_the_labs_and_refuses_unknown_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    listing = capsys.readouterr().out
    assert all(lab.name in listing for lab in LABS)
    for lab in LABS:
        line = next(line for line in listing.splitlines() if f" {lab.name} " in line)
        assert ("[" in line) == (lab.start != "make up"), line
        assert (f"RELAY={lab.relay}" in line) == (lab.relay != "builtin"), line
        assert ("POSTGRES=ha" in line) == (lab.postgres == "ha"), line
        assert ("SHARE_GROUPS=on" in line) == lab.share_groups, line
    assert main(["no-such-lab"]) == 2
    assert "unknown lab" in capsys.readouterr().err
    assert main(["--known", "crash-after-commit"]) == 0


def test_make_lab_starts_the_system_its_labs_need(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RELAY", raising=False)
    monkeypatch.delenv("POSTGRES", raising=False)
    monkeypatch.delenv("SHARE_GROUPS", raising=False)
    for names, system in (
        (["stopped-connector"], "RELAY=debezium"),
        (["relay-crash"], "RELAY=builtin"),
        (["failover"], "RELAY=builtin POSTGRES=ha"),
        (["relay-crash", "failover"], "RELAY=builtin POSTGRES=ha"),
        (["all"], "RELAY=builtin POSTGRES=ha"),
        (["lock-expiry"], "RELAY=builtin SHARE_GROUPS=on"),
        (["lock-expiry", "relay-crash"], "RELAY=builtin"),
    ):
        assert main(["--system", *names]) == 0
        assert capsys.readouterr().out.strip() == system, names
    monkeypatch.setenv("POSTGRES", "ha")
    assert main(["--system", "relay-crash"]) == 0 and capsys.readouterr().out.strip() == "RELAY=builtin POSTGRES=ha"
    monkeypatch.setenv("SHARE_GROUPS", "on")
    assert main(["--system", "relay-crash"]) == 0
    assert capsys.readouterr().out.strip() == "RELAY=builtin POSTGRES=ha SHARE_GROUPS=on"
    monkeypatch.delenv("SHARE_GROUPS")
    monkeypatch.setenv("POSTGRES", "single")
    monkeypatch.setenv("RELAY", "debezium")
    assert main(["--system", "all"]) == 0 and capsys.readouterr().out.strip() == "RELAY=debezium"
