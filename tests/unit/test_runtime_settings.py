"""Every runtime process's settings validate themselves at start and document their defaults;
a bad value stops the process with the variable named."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from effectively_once import cli
from effectively_once.consumer.processor import PATHS
from effectively_once.consumer.wiring import ConsumerSettings
from effectively_once.lab.teaching import with_teaching_paths
from effectively_once.outcomes import Strategy
from effectively_once.pending_work import WorkerSettings
from effectively_once.process import ProcessSettings, load
from effectively_once.relay.settings import RelaySettings

REQUIRED = {"DATABASE_URL": "postgresql://u:p@h/d", "KAFKA_BOOTSTRAP_SERVERS": "k:9092"}


@pytest.mark.parametrize("settings_class", [ConsumerSettings, WorkerSettings, RelaySettings])
def test_every_process_settings_extend_the_one_base_and_document_each_field(
    settings_class: type[ProcessSettings],
) -> None:
    assert issubclass(settings_class, ProcessSettings)
    for name in ("CONTROL_PORT", "EO_FAULTS", "LOG_LEVEL", "TELEMETRY_TOPIC"):
        assert name in settings_class.model_fields, name
    assert settings_class.__doc__


@pytest.mark.parametrize(
    ("variable", "value", "complaint"),
    [
        ("CONSUMER_BATCH_SIZE", "0", "CONSUMER_BATCH_SIZE"),
        ("CONSUMER_ISOLATION_LEVEL", "READ UNCOMMITTED", "CONSUMER_ISOLATION_LEVEL"),
        ("DEDUP_HORIZON_DAYS", "-1", "DEDUP_HORIZON_DAYS"),
        ("LOG_LEVEL", "chatty", "LOG_LEVEL"),
        ("CONTROL_PORT", "70000", "CONTROL_PORT"),
        ("EO_FAULTS", "before_commit=explode", "bad fault spec"),
        ("CONSUMER_STRATEGY", "trust_me", "CONSUMER_STRATEGY"),
        ("DATABASE_URL", "", "DATABASE_URL"),
    ],
)
def test_a_bad_value_stops_the_consumer_at_start_with_the_variable_named(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, complaint: str
) -> None:
    for name, good in REQUIRED.items():
        monkeypatch.setenv(name, good)
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as stopped:
        load(ConsumerSettings)
    assert complaint in str(stopped.value) and "ConsumerSettings" in str(stopped.value)


def test_defaults_are_the_safe_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, good in REQUIRED.items():
        monkeypatch.setenv(name, good)
    settings = load(ConsumerSettings)
    assert settings.CONSUMER_STRATEGY is Strategy.CORRECT and settings.CONSUMER_ISOLATION_LEVEL == "READ COMMITTED"
    assert settings.LOG_LEVEL == "INFO" and settings.CONTROL_PORT is None and settings.CONSUMER_BATCH_SIZE == 1
    monkeypatch.setenv("LOG_LEVEL", "debug")
    assert load(ConsumerSettings).LOG_LEVEL == "DEBUG"


def test_the_relay_names_what_it_needs() -> None:
    with pytest.raises(ValidationError, match="KAFKA_BOOTSTRAP_SERVERS"):
        RelaySettings(KAFKA_BOOTSTRAP_SERVERS="")


def test_the_demo_gives_every_strategy_in_the_order_the_enum_names_them() -> None:
    assert list(PATHS) == [Strategy.CORRECT]
    assert list(with_teaching_paths(PATHS)) == list(Strategy)


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["--own", "no-equals-sign"], "NAMESPACE=FOLDER"),
        (["--own", "=folder"], "NAMESPACE=FOLDER"),
    ],
)
def test_the_migrate_command_refuses_a_bad_argument_with_its_form(
    argv: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.migrate_main(["--database-url", "postgresql://nowhere", *argv])
    assert stopped.value.code == 2 and complaint in capsys.readouterr().err


@pytest.mark.parametrize("horizon", ["0", "-3", "inf", "nan", "soon"])
def test_the_purge_command_refuses_a_horizon_that_is_not_a_positive_number(
    horizon: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.purge_main(["--database-url", "postgresql://nowhere", "--horizon-days", horizon])
    assert stopped.value.code == 2 and "--horizon-days" in capsys.readouterr().err


def test_the_commands_need_a_database(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    with pytest.raises(SystemExit, match="DATABASE_URL"):
        cli.purge_main([])
