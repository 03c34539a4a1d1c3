from __future__ import annotations

import configparser
import shlex
from pathlib import Path

import pytest
from supervisor.datatypes import dict_of_key_value_pairs

from infra.launcher.errors import LaunchError
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


def test_percent_signs_quotes_and_json_survive_supervisors_parsing() -> None:
    environment = {"URL": 'postgresql://u:p%"q@h/d', "JSON": '{"a": "x,y=z"}', "PLAIN": "v"}
    text = render_config(Path("/state"), [Program("p", ["echo", "100%"], environment=environment)])
    parser = configparser.RawConfigParser()
    parser.read_string(text)
    assert shlex.split(parser.get("program:p", "command").replace("%%", "%")) == ["echo", "100%"]
    # Read back exactly as supervisord does.
    raw = parser.get("program:p", "environment") % {}
    assert dict_of_key_value_pairs(raw) == environment


def test_a_value_supervisord_cannot_carry_is_refused_with_a_reason() -> None:
    with pytest.raises(LaunchError, match="both kinds of quote"):
        render_config(Path("/state"), [Program("p", ["x"], environment={"K": "a'b\"c"})])
