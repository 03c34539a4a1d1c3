"""Run the chaos panel: `python -m services.chaos_panel`."""

import logging

import uvicorn

from effectively_once import logs
from effectively_once.telemetry import announce_start
from services.chaos_panel.app import create_app
from services.chaos_panel.settings import PanelSettings


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
