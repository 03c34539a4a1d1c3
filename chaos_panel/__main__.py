"""Run the chaos panel: `python -m chaos_panel`."""

import logging

from chaos_panel.settings import PanelSettings
from chaos_panel.web.app import create_app
from effectively_once import logs
from effectively_once.process import load
from services.http_process import serve_http


def main() -> None:
    settings = load(PanelSettings)
    logs.configure(logging.INFO)
    serve_http("chaos-panel", create_app(settings), settings, settings.CHAOS_PANEL_HOST, settings.CHAOS_PANEL_PORT)


if __name__ == "__main__":
    main()
