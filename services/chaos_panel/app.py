"""The panel's web application: a status page, a health endpoint and Prometheus metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from prometheus_client import make_asgi_app

from services.chaos_panel.auditor import audit, database_reader
from services.chaos_panel.health import database_checks, kafka_check, per_database
from services.settings import Settings
from services.topology import CONSUMERS, DATABASES, EVENT_TOPICS

TEMPLATES = Jinja2Templates(directory=Path(__file__).parent / "templates")


def create_app(settings: Settings) -> FastAPI:
    """Build the panel for these settings; nothing connects until a page is asked for."""
    app = FastAPI(title="effectively-once chaos panel", version="0.1.0")
    app.mount("/metrics", make_asgi_app())

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/", response_class=HTMLResponse, tags=["pages"])
    def home(request: Request) -> Any:
        """What the platform is made of, and whether each part answers."""
        checks = [
            kafka_check(settings.kafka_bootstrap_servers),
            *database_checks(settings.DATABASE_URL),
        ]
        verdict = None
        if all(check.ok for check in checks) and settings.DATABASE_URL:
            auditor_url = settings.DATABASE_URL
            verdict = audit(database_reader(lambda name: per_database(auditor_url, name)))
        return TEMPLATES.TemplateResponse(
            request,
            "index.html",
            {
                "checks": checks,
                "all_ok": all(check.ok for check in checks),
                "databases": DATABASES,
                "topics": EVENT_TOPICS,
                "consumers": CONSUMERS,
                "verdict": verdict,
            },
        )

    return app
