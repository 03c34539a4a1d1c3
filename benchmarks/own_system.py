"""The systems a benchmark runs on: the run's default one's infrastructure, or a system of its own
beside it (its own state directory and ports)."""

from __future__ import annotations

from collections.abc import Callable

from infra.launcher import stack
from services.settings import Settings


def default_infrastructure(say: Callable[[str], None]) -> Settings:
    """The default system's PostgreSQL and Kafka, started unless they run (no platform processes),
    and settings that point at them."""
    endpoints = stack.up(Settings(), say, with_platform=False)
    return Settings(
        DATABASE_URL=endpoints.admin_database_url, KAFKA_BOOTSTRAP_SERVERS=endpoints.kafka_bootstrap_servers
    )


def own_system(name: str, ports: dict[str, int], **settings: object) -> Settings:
    """The settings of a system in `<default state directory>-bench-<name>` on `ports`, with its
    own PostgreSQL and Kafka, and `settings` over the defaults."""
    default = Settings()
    return Settings.model_validate(
        {
            **ports,
            "EO_STATE_DIR": default.EO_STATE_DIR.parent / f"{default.EO_STATE_DIR.name}-bench-{name}",
            "DATABASE_URL": None,
            "KAFKA_BOOTSTRAP_SERVERS": None,
            **settings,
        }
    )
