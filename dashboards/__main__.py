"""`make dashboards`: write every dashboard's JSON to dashboards/generated/ (compose provisions it)."""

from __future__ import annotations

import sys
from pathlib import Path

from dashboards.build import DASHBOARDS, render

GENERATED = Path(__file__).parent / "generated"


def main() -> int:
    GENERATED.mkdir(exist_ok=True)
    for name in DASHBOARDS:
        path = GENERATED / f"{name}.json"
        path.write_text(render(name))
        print(f"wrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
