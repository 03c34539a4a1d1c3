"""Run the chaos panel: `python -m services.chaos_panel`."""

import uvicorn

from services.chaos_panel.app import create_app
from services.settings import Settings


def main() -> None:
    settings = Settings()
    uvicorn.run(
        create_app(settings),
        host=settings.CHAOS_PANEL_HOST,
        port=settings.CHAOS_PANEL_PORT,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
