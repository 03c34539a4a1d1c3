"""The inventory consumer's other implementations, built the way `make` builds them, so the
black-box suite and the end-to-end tests start the same program a user runs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from infra.launcher import inventory_implementations
from services.settings import PROJECT_ROOT

NODE_INVENTORY = PROJECT_ROOT / "services" / "inventory-node"


def _run(command: list[str], cwd: Path) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed in {cwd}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def node_inventory_command() -> list[str]:
    """`node dist/main.js`, after `npm ci` (when the lockfile changed) and `tsc`."""
    node = shutil.which("node")
    if node is None:
        raise RuntimeError("node is not on PATH: the TypeScript consumer needs Node.js 20 or newer")
    _run(["make", "--no-print-directory", "-s", "inventory-node"], PROJECT_ROOT)
    return [node, str(NODE_INVENTORY / "dist" / "main.js")]


JAVA_QUICK_START = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xss512k"
"""For tests that start many short-lived JVMs: the C1 compiler only, the serial collector. Not for
the benchmarks, which run the JVM as a user would."""


def java_inventory_command() -> list[str]:
    """`java -jar` the Spring Boot consumer, with its class archive, as the launcher starts it,
    after `make inventory-java` (`mvn package` when a source changed)."""
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("java is not on PATH: the Spring Boot consumer needs Java 17 or newer")
    _run(["make", "--no-print-directory", "-s", "inventory-java"], PROJECT_ROOT)
    return [java, *inventory_implementations.java_program()]
