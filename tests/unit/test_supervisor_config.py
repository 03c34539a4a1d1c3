from __future__ import annotations

import configparser
import shlex
from pathlib import Path

from infra.launcher.supervisor import Program, render_config


def test_every_program_restarts_on_death_and_never_starts_by_itself() -> None:
    text = render_config(
        Path("/state"),
        [
            Program("postgres", ["postgres", "-D", "/data"], user="postgres", priority=100),
            Program("panel", ["python", "-m", "panel"], environment={"A": "1"}),
        ],
    )
    parser = configparser.RawConfigParser()
    parser.read_string(text)
    for name in ("program:postgres", "program:panel"):
        assert parser.get(name, "autorestart") == "true"
        assert parser.get(name, "autostart") == "false"
        assert parser.get(name, "killasgroup") == "true"
    assert parser.get("program:postgres", "user") == "postgres"
    assert parser.get("program:postgres", "priority") == "100"


def test_percent_signs_and_quotes_survive_supervisors_expansion() -> None:
    text = render_config(
        Path("/state"),
        [
            Program("p", ["echo", "100%"], environment={"URL": 'postgresql://u:p%"q@h/d'}),
        ],
    )
    parser = configparser.RawConfigParser()
    parser.read_string(text)
    assert shlex.split(parser.get("program:p", "command").replace("%%", "%")) == ["echo", "100%"]
    assert parser.get("program:p", "environment") == 'URL="postgresql://u:p%%\\"q@h/d"'
