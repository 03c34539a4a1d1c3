"""One shape for every benchmark's result, one table, one JSON file, one chart."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from services.settings import PROJECT_ROOT

RESULTS = PROJECT_ROOT / "artifacts" / "bench"


@dataclass(frozen=True)
class Row:
    section: str
    case: str
    value: float
    unit: str
    target: str = ""
    met: bool | None = None
    """None: no target."""
    detail: str = ""
    ratio_to_target: float | None = None
    """How far the value is toward its target (1.0 = exactly met; above 1 is better), for the chart."""


def table(rows: Sequence[Row]) -> list[str]:
    lines = [f"{'section':<10}{'case':<34}{'value':>14}  {'unit':<8}{'target':<30}{'':<8}detail"]
    for row in rows:
        verdict = "" if row.met is None else ("met" if row.met else "NOT MET")
        lines.append(
            f"{row.section:<10}{row.case:<34}{row.value:>14,.1f}  {row.unit:<8}{row.target:<30}{verdict:<8}{row.detail}"
        )
    return lines


def write_json(rows: Sequence[Row], path: Path = RESULTS / "bench.json", facts: dict[str, str] | None = None) -> Path:
    """The run's rows and what is known of it (when, where), as JSON: what the pages are written from."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"run": facts or {}, "rows": [asdict(row) for row in rows]}, indent=2) + "\n")
    return path


def draw_png(rows: Sequence[Row], path: Path = RESULTS / "bench.png") -> Path:
    """Each row with a target as a bar of value ÷ target (1 = just met), green when met."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    charted = [row for row in rows if row.ratio_to_target is not None]
    figure, axes = plt.subplots(figsize=(9, 0.45 * len(charted) + 1.4))
    labels = [f"{row.case} ({row.value:,.0f} {row.unit})" for row in charted]
    values = [row.ratio_to_target or 0.0 for row in charted]
    colours = ["#2e9d52" if row.met else "#c62828" for row in charted]
    axes.barh(labels, values, color=colours)
    axes.axvline(1.0, color="#1d2433", linewidth=1)
    axes.invert_yaxis()
    axes.set_xlabel("measured ÷ target (right of the line: target met)")
    axes.set_title("make bench: every target, one run")
    return save_figure(figure, path)


def save_figure(figure: Any, path: Path, dpi: int = 110) -> Path:
    """Lay `figure` out, write it to `path` (its folder made if need be) and free it: every chart's end."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=dpi)
    plt.close(figure)
    return path
