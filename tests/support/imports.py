"""What a module imports, read from its source: for the tests that hold the layering."""

from __future__ import annotations

import ast


def imported_modules(source: str, module: str) -> set[str]:
    """Every dotted module `source` (the text of the module named `module`) imports, relative
    imports resolved, with each name of a `from X import name` counted as X.name as well (it may
    be a module)."""
    package = module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            origin = ".".join([*base, *([node.module] if node.module else [])])
            found |= {origin} | {f"{origin}.{alias.name}" for alias in node.names}
    return found
