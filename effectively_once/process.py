"""One settings base and one start-up for every process the runtime runs: consumers, executors
(the pending-work worker) and the relay.

`ProcessSettings` holds what each of them reads from its environment (logs, telemetry, fault
points, the control endpoint); each process's settings extend it and validate themselves at
start, so a bad value stops the process with the variable named instead of failing later.
`start` configures logging, telemetry and fault points; `serve` opens the control endpoint;
`stop_on_signals` turns SIGTERM and SIGINT into a clean stop.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar
from wsgiref.simple_server import WSGIServer

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import SettingsConfigDict

from . import logs
from .control_endpoint import serve_control
from .faults import FaultPoints
from .kafka_client import KafkaCredentials
from .kafka_requests import KafkaStatistics
from .request_checks import HostSettings
from .telemetry import TELEMETRY_TOPIC, Telemetry, report_faults
from .telemetry import connect as connect_telemetry
from .typed_payload import describe

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
Settings = TypeVar("Settings", bound="ProcessSettings")


class ProcessSettings(KafkaCredentials, KafkaStatistics, HostSettings):
    """What every process of the platform reads from its environment, with the default it runs
    with: the base of each process kind's settings (consumer, executor, relay, HTTP service,
    panel), its Kafka principal (KafkaCredentials), how often its Kafka clients count their
    requests (KafkaStatistics) and the Host names it answers (HostSettings) included."""

    model_config = SettingsConfigDict(extra="ignore", validate_default=True)

    KAFKA_BOOTSTRAP_SERVERS: str = ""
    """host:port[,host:port…] of the Kafka cluster (consumers and the relay require it)."""
    CONTROL_PORT: int | None = Field(default=None, ge=1, le=65535)
    """Serves /metrics, /faults and the process's own controls (control_endpoint.py); none when unset."""
    CONTROL_HOST: str = "127.0.0.1"
    """The control endpoint's address: loopback unless a supervisor elsewhere must reach it."""
    EO_FAULTS: str = ""
    """Fault points armed at start, e.g. `after_commit_before_ack=crash` (see faults.py)."""
    EO_PROCESS_NAME: str | None = None
    """The process's name as its supervisor knows it; telemetry and restarts use it."""
    TELEMETRY_TOPIC: str = TELEMETRY_TOPIC
    """Where deliveries, faults and starts are told (empty: nowhere)."""
    LOG_LEVEL: LogLevel = "INFO"
    EO_RUN_ID: str = ""
    """The supervisor's run (a restart within one run is counted as one); told with each start."""

    @field_validator("LOG_LEVEL", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("EO_FAULTS")
    @classmethod
    def _fault_spec(cls, value: str) -> str:
        FaultPoints().arm_from_spec(value)  # raises ValueError, naming the bad item
        return value


@dataclass
class Started:
    """What `start` set up for the process."""

    name: str
    telemetry: Telemetry
    faults: FaultPoints


def start(settings: ProcessSettings, default_name: str, instance_id: str | None = None) -> Started:
    """Logs as JSON at LOG_LEVEL, telemetry (when a topic and a bootstrap are set), and fault
    points armed from EO_FAULTS that tell each firing."""
    logs.configure(getattr(logging, settings.LOG_LEVEL))
    name = settings.EO_PROCESS_NAME or default_name
    telemetry = _telemetry(settings, name, instance_id)
    faults = FaultPoints()
    faults.on_fire = report_faults(telemetry)
    if settings.EO_FAULTS:
        faults.arm_from_spec(settings.EO_FAULTS)
    return Started(name, telemetry, faults)


def serve(started: Started, settings: ProcessSettings, **controls: Any) -> WSGIServer | None:
    """Open the control endpoint when CONTROL_PORT is set (`controls` as serve_control takes
    them), answering the Host names of ALLOWED_HOSTS; the server, or None when there is none."""
    if not settings.CONTROL_PORT:
        return None
    controls.setdefault("allowed_hosts", settings.allowed_hosts())
    return serve_control(started.faults, settings.CONTROL_HOST, settings.CONTROL_PORT, **controls)


def announce_start(settings: ProcessSettings, default_name: str) -> None:
    """For processes without a runtime of their own (the HTTP services): tell one `started`
    record, so their restarts are counted too."""
    if settings.KAFKA_BOOTSTRAP_SERVERS and settings.TELEMETRY_TOPIC:
        telemetry = _telemetry(settings, settings.EO_PROCESS_NAME or default_name, None)
        telemetry.emit("started")
        telemetry.flush(5)


def _telemetry(settings: ProcessSettings, name: str, instance_id: str | None) -> Telemetry:
    """The process's telemetry: to TELEMETRY_TOPIC when a Kafka cluster is named, else none."""
    topic = settings.TELEMETRY_TOPIC if settings.KAFKA_BOOTSTRAP_SERVERS else ""
    return connect_telemetry(settings.KAFKA_BOOTSTRAP_SERVERS, name, instance_id, topic, settings.EO_RUN_ID)


def stop_on_signals(stop: Callable[[], None]) -> None:
    """Call `stop` on SIGTERM and SIGINT (from the main thread)."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop())


def load(settings_class: type[Settings]) -> Settings:
    """The settings from the environment; a missing or bad variable stops the process with its name."""
    try:
        return settings_class()
    except ValidationError as error:
        raise SystemExit(f"{settings_class.__name__}: {describe(error, most=20)}") from None
