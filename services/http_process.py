"""One start-up for the platform's HTTP processes (the order API, the two sandboxes, the panel):
their settings, read from the environment like every process's, and how each is served."""

from __future__ import annotations

from typing import Any, TypeVar

import uvicorn
from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from effectively_once.telemetry import announce_start
from effectively_once.typed_payload import describe
from services.sandbox_admin import DEVELOPMENT_DEFAULT


class HttpServiceSettings(BaseSettings):
    """What an HTTP service reads from its environment besides where it listens: its database."""

    model_config = SettingsConfigDict(extra="ignore")

    DATABASE_URL: str = Field(min_length=1)
    """The service's own database (its own role)."""


class SandboxSettings(HttpServiceSettings):
    """A sandbox's settings: besides its database, who may change its faults."""

    SANDBOX_ADMIN_PASSWORD: str = DEVELOPMENT_DEFAULT
    """The Bearer token its /admin/faults routes need (services/sandbox_admin.py); empty: the default."""

    @field_validator("SANDBOX_ADMIN_PASSWORD")
    @classmethod
    def _empty_is_the_default(cls, value: str) -> str:
        return value or DEVELOPMENT_DEFAULT


class Listening(BaseSettings):
    """Where an HTTP service listens: `<PREFIX>HOST` and `<PREFIX>PORT`, the prefix its own
    (ORDERS_API_, PAYMENT_PROVIDER_, MAIL_), as the launcher and docker-compose name them."""

    model_config = SettingsConfigDict(extra="ignore")

    HOST: str = "127.0.0.1"
    PORT: int | None = Field(default=None, ge=1, le=65535)


S = TypeVar("S", bound=BaseSettings)


def read(settings_class: type[S], **init: Any) -> S:
    """`settings_class` from the environment, or an exit that names every invalid variable."""
    try:
        return settings_class(**init)
    except ValidationError as error:
        raise SystemExit(f"{settings_class.__name__}: {describe(error, most=20)}") from None


def serve_http(name: str, app: Any, prefix: str, default_port: int) -> None:
    """Announce the process's start (telemetry) and serve `app` where `<prefix>HOST` and
    `<prefix>PORT` say, until SIGTERM or SIGINT."""
    listening = read(Listening, _env_prefix=prefix)
    announce_start(name)
    uvicorn.run(app, host=listening.HOST, port=listening.PORT or default_port, log_level="warning")
