"""The chaos panel's web application: pages, the control API, health and Prometheus metrics."""

from __future__ import annotations

import faulthandler
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import make_asgi_app

from chaos_panel.context import Panel, build_panel
from chaos_panel.settings import PanelSettings
from chaos_panel.web import actions, pages, reads
from services import http_front_door

log = logging.getLogger(__name__)


def create_app(settings: PanelSettings, panel: Panel | None = None) -> FastAPI:
    """Build the panel; its telemetry reader starts with the application and stops with it."""
    panel = panel or build_panel(settings)
    if panel.guard.token_required and not settings.CHAOS_PANEL_TOKEN:
        log.warning(
            "the panel listens on %s, beyond loopback: its pages and actions need a token. Open "
            "http://<this host>:%d/login and give it panel-token=%s (or set CHAOS_PANEL_TOKEN).",
            settings.CHAOS_PANEL_HOST,
            settings.CHAOS_PANEL_PORT,
            panel.guard.token,
        )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        panel.start()
        faulthandler.cancel_dump_traceback_later()  # armed at start (__main__.py): it serves now
        yield
        panel.stop()

    app = FastAPI(title="effectively-once chaos panel", version="0.2.0", lifespan=lifespan)
    app.state.panel = panel
    app.mount("/metrics", make_asgi_app())
    app.mount("/static", StaticFiles(directory=Path(__file__).parent / "static"), name="static")

    @app.middleware("http")
    async def reads_need_the_token(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        """Exposed mode: nothing but the login page answers without the token."""
        if request.method in ("GET", "HEAD") and not panel.guard.may_read(request.url.path, request):
            if request.url.path.startswith(("/api/", "/fragments/")):
                return JSONResponse({"detail": "refused: a token is needed (log in at /login)"}, status_code=401)
            return RedirectResponse("/login", status_code=303)
        return await call_next(request)

    http_front_door.install(app, "the chaos panel's auditor database", settings.allowed_hosts() | _own_host(settings))

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    app.include_router(pages.router)
    app.include_router(reads.router)
    app.include_router(actions.router)
    return app


def _own_host(settings: PanelSettings) -> frozenset[str]:
    """The name the panel was told to listen on, when it is one (not a wildcard)."""
    host = settings.CHAOS_PANEL_HOST.strip().lower()
    return frozenset() if host in ("", "0.0.0.0", "::") else frozenset({host})
