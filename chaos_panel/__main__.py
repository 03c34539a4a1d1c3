"""Run the chaos panel: `python -m chaos_panel`."""

import logging

from chaos_panel.settings import PanelSettings
from chaos_panel.web.app import create_app
from effectively_once import logs
from services.http_process import read, serve_http


def main() -> None:
    settings = read(PanelSettings)
    logs.configure(logging.INFO)
    serve_http("chaos-panel", create_app(settings), "CHAOS_PANEL_", settings.CHAOS_PANEL_PORT)


if __name__ == "__main__":
    main()
