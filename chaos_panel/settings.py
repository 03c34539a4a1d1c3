"""What the panel reads from its environment (the launcher and docker-compose set all of it)."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import Field

from effectively_once.process import ProcessSettings


class PanelSettings(ProcessSettings):
    """The panel's settings, on the base every process's settings share."""

    DATABASE_URL: str | None = None
    """The read-only auditor's URL (any database: the panel switches database per query)."""
    KAFKA_BOOTSTRAP_SERVERS: str = "127.0.0.1:29092"
    CHAOS_PANEL_HOST: str = "127.0.0.1"
    CHAOS_PANEL_PORT: int = 8080
    CHAOS_PANEL_TOKEN: str = ""
    """Required for every control action when the panel listens beyond loopback; generated (and
    logged once) when not set there."""
    CONTROL_URLS: dict[str, str] = Field(default_factory=dict)
    """Process name -> control endpoint, as JSON: {"inventory": "http://127.0.0.1:9103", ...}."""
    ORDERS_API_URL: str = "http://127.0.0.1:8000"
    PAYMENT_PROVIDER_URL: str = "http://127.0.0.1:8001"
    MAIL_URL: str = "http://127.0.0.1:8002"
    SANDBOX_ADMIN_PASSWORD: str = "sandbox-admin-dev-password"
    """The sandboxes' admin password: the panel changes their faults with it."""
    BROKER_CONTROL_URL: str = ""
    """The Kafka nodes' control endpoint (native path): the broker faults go through it."""
    POSTGRES_CONTROL_URL: str = ""
    """The PostgreSQL pair's control endpoint (native path, POSTGRES=ha): failovers go through it."""
    KAFKA_CONNECT_URL: str = ""
    """Kafka Connect's REST API under RELAY=debezium: the panel shows each slot and pauses or resumes
    each connector through it. Empty under the built-in relay."""
    PROMETHEUS_URL: str = ""
    """The panel draws its small live charts from here."""
    GRAFANA_URL: str = ""
    """Where a browser reaches Grafana (compose): the panel links its dashboards."""
    SHARE_GROUPS: Literal["off", "on"] = "off"
    """Whether the sales projection and the notification dispatch consume as share groups (the
    lock-expiry lab needs them)."""
    SHARE_LOCK_SECONDS: float = 30
    """How long a share group's record stays locked to the member that received it, as the
    launcher configured the groups: the lock-expiry lab stalls a handler past it."""
    AUDIT_STUCK_AFTER_SECONDS: float = 60
    """A saga not final after this long is flagged as stuck."""

    @property
    def loopback_only(self) -> bool:
        host = self.CHAOS_PANEL_HOST
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False
