"""One start-up for the platform's HTTP processes (the order API, the two sandboxes, the panel):
their settings, on the base every process's settings share, and how each is served."""

from __future__ import annotations

from typing import Any

import uvicorn
from pydantic import Field, field_validator

from effectively_once.process import ProcessSettings, announce_start
from services.sandbox_admin import DEVELOPMENT_DEFAULT


class HttpServiceSettings(ProcessSettings):
    """What an HTTP service reads from its environment: its database and where it listens."""

    DATABASE_URL: str = Field(min_length=1)
    """The service's own database (its own role)."""

    @property
    def listen(self) -> tuple[str, int]:
        """Where the service listens: (host, port)."""
        raise NotImplementedError


class OrdersApiSettings(HttpServiceSettings):
    """The order API's settings."""

    ORDERS_API_HOST: str = "127.0.0.1"
    ORDERS_API_PORT: int = Field(default=8000, ge=1, le=65535)

    @property
    def listen(self) -> tuple[str, int]:
        return self.ORDERS_API_HOST, self.ORDERS_API_PORT


class SandboxSettings(HttpServiceSettings):
    """A sandbox's settings: besides its database and where it listens, who may change its faults."""

    SANDBOX_ADMIN_PASSWORD: str = DEVELOPMENT_DEFAULT
    """The Bearer token its /admin/faults routes need (services/sandbox_admin.py); empty: the default."""

    @field_validator("SANDBOX_ADMIN_PASSWORD")
    @classmethod
    def _empty_is_the_default(cls, value: str) -> str:
        return value or DEVELOPMENT_DEFAULT


class PaymentProviderSettings(SandboxSettings):
    """The payment provider sandbox's settings."""

    PAYMENT_PROVIDER_HOST: str = "127.0.0.1"
    PAYMENT_PROVIDER_PORT: int = Field(default=8001, ge=1, le=65535)

    @property
    def listen(self) -> tuple[str, int]:
        return self.PAYMENT_PROVIDER_HOST, self.PAYMENT_PROVIDER_PORT


class MailSettings(SandboxSettings):
    """The mail sandbox's settings."""

    MAIL_HOST: str = "127.0.0.1"
    MAIL_PORT: int = Field(default=8002, ge=1, le=65535)

    @property
    def listen(self) -> tuple[str, int]:
        return self.MAIL_HOST, self.MAIL_PORT


def serve_http(name: str, app: Any, settings: ProcessSettings, host: str, port: int) -> None:
    """Announce the process's start (telemetry) and serve `app` on `host`:`port` until SIGTERM or SIGINT."""
    announce_start(settings, name)
    uvicorn.run(app, host=host, port=port, log_level="warning")
