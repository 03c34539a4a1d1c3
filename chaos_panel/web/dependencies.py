"""What a route of the panel is given through `Depends`: the panel, built once by the application
(`create_app`) and kept on its state."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from chaos_panel.context import Panel


def get_panel(request: Request) -> Panel:
    """The panel the application was built with."""
    panel: Panel = request.app.state.panel
    return panel


PanelDep = Annotated[Panel, Depends(get_panel)]
"""A route's parameter for the panel: `def route(panel: PanelDep) -> ...`."""
