"""A system of its own beside the run's default one: its own state directory and ports."""

from __future__ import annotations

from services.settings import Settings


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
