"""The inventory slot's three implementations, and the command line each runs with.

Python is the demo's own; the Java (Spring Boot) and TypeScript consumers are built by `make`
(`make inventory-java`, `make inventory-node`: Maven and npm caches live outside the checkout)
before the supervisor starts them. All three keep docs/consumer-process-contract.md.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable

from infra.launcher.errors import LaunchError
from services.settings import PROJECT_ROOT

JAVA_JAR = PROJECT_ROOT / "services" / "inventory-java" / "target" / "inventory-java.jar"
JAVA_EXTRACTED = JAVA_JAR.parent / "extracted"
"""The jar laid out for class-data sharing, with its class archive (make-class-archive.sh)."""
NODE_MAIN = PROJECT_ROOT / "services" / "inventory-node" / "dist" / "main.js"
JAVA_OPTIONS = ("-Xms64m", "-Xmx256m", "-XX:+UseSerialGC")
"""Small and single-threaded collection: one of fifteen processes on a 2-core machine."""


def command(implementation: str) -> list[str]:
    """The inventory consumer's command line for `implementation`."""
    if implementation == "python":
        return [sys.executable, "-m", "services.inventory"]
    if implementation == "java":
        return [_tool("java", "Java 17 or newer"), *JAVA_OPTIONS, *java_program()]
    if implementation == "node":
        return [_tool("node", "Node.js 20 or newer"), str(NODE_MAIN)]
    raise LaunchError(f"INVENTORY_IMPL is {implementation!r}", "set it to python, java or node")


def java_program() -> list[str]:
    """The Java consumer's arguments after the JVM's options: the extracted layout, with its class
    archive when the training made one, once `make inventory-java` laid out the current jar; the
    jar itself otherwise (a jar rebuilt by hand, a build without the layout)."""
    extracted = JAVA_EXTRACTED / "inventory-java.jar"
    if not JAVA_JAR.exists() or not extracted.exists() or extracted.stat().st_mtime < JAVA_JAR.stat().st_mtime:
        return ["-jar", str(JAVA_JAR)]
    archive = JAVA_EXTRACTED / "inventory-java.jsa"
    return [*([f"-XX:SharedArchiveFile={archive}"] if archive.exists() else []), "-jar", str(extracted)]


def build(implementation: str, say: Callable[[str], None]) -> None:
    """Build the implementation's program when a source changed since the last build (make's own
    check: seconds when nothing did)."""
    if implementation == "python":
        return
    target = f"inventory-{implementation}"
    say(f"building the {implementation} inventory consumer (make {target})")
    done = subprocess.run(
        ["make", "--no-print-directory", "-s", target], cwd=PROJECT_ROOT, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise LaunchError(
            f"make {target} failed: the {implementation} inventory consumer could not be built\n"
            f"{(done.stdout + done.stderr)[-2000:]}",
            f"run `make {target}` and read its output",
        )


def _tool(name: str, what: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise LaunchError(
            f"INVENTORY_IMPL needs {name} ({what}) and it is not on PATH",
            f"install {name}, or run INVENTORY_IMPL=python",
        )
    return found
