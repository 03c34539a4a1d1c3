"""Run the chaos panel: `python -m chaos_panel`."""

import faulthandler
import logging

from chaos_panel.settings import PanelSettings
from chaos_panel.web.app import create_app
from effectively_once import logs
from effectively_once.process import load
from services.http_process import serve_http

STARTUP_STACKS_AFTER_SECONDS = 45
"""A panel not serving this long after its start writes every thread's stack to its log (the
launcher waits 120 s for it, then names that log): what it waits on is there to read."""


def main() -> None:
    faulthandler.dump_traceback_later(STARTUP_STACKS_AFTER_SECONDS)  # cancelled once it serves (app.py)
    settings = load(PanelSettings)
    logs.configure(logging.INFO)
    logging.getLogger(__name__).info("chaos-panel starting")
    serve_http("chaos-panel", create_app(settings), settings, settings.CHAOS_PANEL_HOST, settings.CHAOS_PANEL_PORT)


if __name__ == "__main__":
    main()
