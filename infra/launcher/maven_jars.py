"""Jars from Maven Central, fetched once through a pom and cached outside git.

A pom lists what a Java program needs at run time (the Kafka broker's, Kafka Connect's); nothing
is built: `mvn dependency:copy-dependencies` copies the jars into a cache directory keyed by the
pom's content, so a changed pom gets a fresh directory and an unchanged one is never fetched again.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from infra.launcher.errors import LaunchError
from services.settings import Settings


def jar_dir(settings: Settings, pom: Path, cache_name: str) -> Path:
    """Where this pom's jars are cached."""
    digest = hashlib.sha1(pom.read_bytes()).hexdigest()[:12]
    return settings.EO_CACHE_DIR / cache_name / digest / "libs"


def ensure(settings: Settings, pom: Path, cache_name: str, what: str, say: Callable[[str], None]) -> Path:
    """The directory of `pom`'s jars, fetched from Maven Central on the first run only."""
    libs = jar_dir(settings, pom, cache_name)
    if (libs / ".complete").exists():
        return libs
    mvn = shutil.which("mvn")
    if not mvn:
        raise LaunchError(
            f"Maven (mvn) was not found, and {what}'s jars are not cached yet",
            "install Maven (on Debian: `apt-get install maven`)",
        )
    say(f"fetching {what}'s jars from Maven Central (first run only, ~30 s)")
    staging = libs.with_name("libs.partial")
    shutil.rmtree(staging, ignore_errors=True)
    started = time.monotonic()
    command = [mvn, "-B", "-q", "-f", str(pom), "dependency:copy-dependencies", "-DincludeScope=runtime"]
    result = subprocess.run([*command, f"-DoutputDirectory={staging}"], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise LaunchError(
            f"Maven could not fetch {what}'s jars:\n" + (result.stdout + result.stderr)[-2000:],
            f"check that Maven Central is reachable (`mvn -f {pom} dependency:resolve`)",
        )
    (staging / ".complete").write_text(pom.read_text())
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)
    say(f"fetched {len(list(libs.glob('*.jar')))} jars in {time.monotonic() - started:.0f} s")
    return libs
