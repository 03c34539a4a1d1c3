"""The chaos panel's web application: pages, the control API, health and Prometheus metrics."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from prometheus_client import make_asgi_app

from services.chaos_panel import controls, pages
from services.chaos_panel.context import Panel, build_panel
from services.chaos_panel.settings import PanelSettings

log = logging.getLogger(__name__)


def create_app(settings: PanelSettings, panel: Panel | None = None) -> FastAPI:
    """Build the panel; its telemetry reader starts with the application and stops with it."""
    panel = panel or build_panel(settings)
    if panel.guard.token_required and not settings.CHAOS_PANEL_TOKEN:
        log.warning(
            "the panel listens on %s, beyond loopback: control actions need a token. Open "
            "http://<this host>:%d/login?token=%s once (or set CHAOS_PANEL_TOKEN).",
            settings.CHAOS_PANEL_HOST,
            settings.CHAOS_PANEL_PORT,
            panel.guard.token,
        )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        panel.start()
        yield
        panel.stop()

    app = FastAPI(title="effectively-once chaos panel", version="0.2.0", lifespan=lifespan)
    app.state.panel = panel
    app.mount("/metrics", make_asgi_app())
    app.mount("/static", StaticFiles(directory=Path(__file__).parent / "static"), name="static")

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    app.include_router(pages.router(panel))
    app.include_router(controls.router(panel))
    return app
