"""The one place the panel's parts are built and wired: settings to clients, readers and runners."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta

from auditor.invariants import Query, Verdict, audit, database_reader
from chaos_panel.acting.broker_faults import BrokerFaults
from chaos_panel.acting.control_endpoints import ControlPlane, ProcessState
from chaos_panel.acting.database_faults import DatabaseFaults
from chaos_panel.acting.injector import Injector
from chaos_panel.acting.lab_runs import LabRuns
from chaos_panel.acting.load_runner import LoadRunner
from chaos_panel.reading import records
from chaos_panel.reading.debezium_slots import CdcRelay
from chaos_panel.reading.health import per_database
from chaos_panel.reading.safe_horizons import SafeHorizons
from chaos_panel.reading.telemetry_store import TelemetryReader, TelemetryStore
from chaos_panel.settings import PanelSettings
from chaos_panel.web.security import Guard
from labs.client import PanelClient


@dataclass
class Panel:
    settings: PanelSettings
    guard: Guard
    control: ControlPlane
    injector: Injector
    loads: LoadRunner
    store: TelemetryStore
    query: Query
    brokers: BrokerFaults
    databases: DatabaseFaults
    horizons: SafeHorizons
    cdc: CdcRelay
    labs: LabRuns
    readers: list[TelemetryReader] = field(default_factory=list)

    last_verdict: tuple[float, Verdict] | None = None
    """When the auditor last answered with the panel's own stuck-after, and what it said."""

    def verdict(self, stuck_after: float | None = None) -> Verdict:
        seconds = self.settings.AUDIT_STUCK_AFTER_SECONDS if stuck_after is None else stuck_after
        answer = audit(self.query, stuck_after=timedelta(seconds=seconds))
        if stuck_after is None:
            self.last_verdict = (time.monotonic(), answer)
        return answer

    def recent_verdict(self, max_age: float = 5.0) -> Verdict:
        """The auditor's last answer if it is at most `max_age` seconds old, else a new one: the
        system map shows the verdict without running the audit a second time beside the page's."""
        last = self.last_verdict
        if last is not None and time.monotonic() - last[0] <= max_age:
            return last[1]
        return self.verdict()

    def teaching(self, states: list[ProcessState]) -> list[ProcessState]:
        """Consumers running a deliberately unsafe strategy."""
        return [state for state in states if state.strategy not in (None, "correct")]

    def start(self) -> None:
        for reader in self.readers:
            reader.start()

    def stop(self) -> None:
        for reader in self.readers:
            reader.stop()
        self.loads.stop()
        self.control.close()
        self.brokers.close()
        self.databases.close()
        self.cdc.close()


def build_panel(settings: PanelSettings) -> Panel:
    auditor_url = settings.DATABASE_URL or ""
    store = TelemetryStore()
    control = ControlPlane(
        settings.CONTROL_URLS,
        settings.PAYMENT_PROVIDER_URL,
        settings.MAIL_URL,
        settings.ORDERS_API_URL,
        sandbox_password=settings.SANDBOX_ADMIN_PASSWORD,
    )

    def retentions() -> dict[str, timedelta]:
        """The retention each consumer runs with, as its control endpoint says."""
        return {
            state.consumer: timedelta(seconds=state.configured_horizon_seconds)
            for state in control.states()
            if state.consumer and state.configured_horizon_seconds
        }

    query = database_reader(lambda name: per_database(auditor_url, name))
    guard = Guard(settings.CHAOS_PANEL_TOKEN, settings.loopback_only)
    host = settings.CHAOS_PANEL_HOST if settings.CHAOS_PANEL_HOST not in ("0.0.0.0", "::", "") else "127.0.0.1"
    own_url = f"http://{f'[{host}]' if ':' in host else host}:{settings.CHAOS_PANEL_PORT}"  # labs use the API
    return Panel(
        settings=settings,
        guard=guard,
        control=control,
        injector=Injector(settings.KAFKA_BOOTSTRAP_SERVERS),
        loads=LoadRunner(settings.ORDERS_API_URL),
        store=store,
        query=query,
        brokers=BrokerFaults(settings.BROKER_CONTROL_URL),
        databases=DatabaseFaults(settings.POSTGRES_CONTROL_URL),
        horizons=SafeHorizons(settings.KAFKA_BOOTSTRAP_SERVERS, retentions),
        cdc=CdcRelay(settings.KAFKA_CONNECT_URL, query),
        labs=LabRuns(lambda: PanelClient(own_url, guard.token or None)),
        readers=[TelemetryReader(settings.KAFKA_BOOTSTRAP_SERVERS, store)],
    )


__all__ = ["Panel", "build_panel", "records"]
