"""Run the chaos panel: `python -m chaos_panel`."""

import logging

import uvicorn

from chaos_panel.settings import PanelSettings
from chaos_panel.web.app import create_app
from effectively_once import logs
from effectively_once.telemetry import announce_start


def main() -> None:
    settings = PanelSettings()
    logs.configure(logging.INFO)
    announce_start("chaos-panel")
    uvicorn.run(
        create_app(settings),
        host=settings.CHAOS_PANEL_HOST,
        port=settings.CHAOS_PANEL_PORT,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
