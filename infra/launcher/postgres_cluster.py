"""A PostgreSQL cluster the project owns: Debian's server binaries, our own port and data directory.

Used only when DATABASE_URL is not set. When the launcher runs as root, the server runs as the
`postgres` system user, as PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from infra.launcher.errors import LaunchError
from services.settings import Settings, redact

DEBIAN_SERVER_GLOB = "/usr/lib/postgresql/*/bin/postgres"


def find_bindir() -> Path | None:
    """The bin directory PG_BINDIR names, else the newest PostgreSQL server's installed, if any."""
    if configured := Settings().PG_BINDIR:
        return Path(configured)
    candidates = sorted(
        Path("/").glob(DEBIAN_SERVER_GLOB.lstrip("/")),
        key=lambda path: int(re.sub(r"\D", "", path.parent.parent.name) or 0),
    )
    if candidates:
        return candidates[-1].parent
    on_path = shutil.which("postgres")
    return Path(on_path).resolve().parent if on_path else None


def ensure_installed(say: Callable[[str], None]) -> Path:
    """The server's bin directory, installing Debian's `postgresql` first when it is missing."""
    bindir = find_bindir()
    if bindir and (bindir / "initdb").exists():
        return bindir
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise LaunchError(
            "no PostgreSQL server is installed",
            "install it (on Debian: `sudo apt-get install postgresql`), "
            "or set DATABASE_URL to a PostgreSQL server you run",
        )
    say("installing Debian's postgresql package (first run only)")
    for command in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", "postgresql"],
    ):
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        if result.returncode != 0:
            raise LaunchError(
                f"`{' '.join(command)}` failed:\n{result.stderr[-2000:]}",
                "install postgresql by hand, or set DATABASE_URL",
            )
    bindir = find_bindir()
    if not bindir:
        raise LaunchError(
            "postgresql was installed but no server binary was found",
            "set PG_BINDIR to the directory that holds `postgres` and `initdb`",
        )
    return bindir


def server_user() -> str | None:
    """The system user the server runs as: `postgres` when we are root, else ourselves (None)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError as missing:
        raise LaunchError(
            "running as root, but there is no `postgres` system user to run PostgreSQL as",
            "install Debian's postgresql package (it creates the user), or run as another user",
        ) from missing
    return "postgres"


def _paths(settings: Settings) -> tuple[Path, Path]:
    root = settings.EO_STATE_DIR / "postgres"
    return root / "data", root / "run"


def _as_server_user(command: list[str], user: str | None) -> list[str]:
    return ["runuser", "-u", user, "--", *command] if user else command


def _give_to(path: Path, user: str | None) -> None:
    if user:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def ensure_initialised(bindir: Path, settings: Settings, say: Callable[[str], None]) -> None:
    """Run initdb once: superuser `postgres` with POSTGRES_PASSWORD, scram on TCP."""
    data, run = _paths(settings)
    user = server_user()
    for directory in (data.parent, run):
        directory.mkdir(parents=True, exist_ok=True, mode=0o755)
        _give_to(directory, user)
    if (data / "PG_VERSION").exists():
        return
    say("creating the project's PostgreSQL cluster (first run only)")
    with tempfile.NamedTemporaryFile("w", dir=data.parent, delete=False) as pwfile:
        pwfile.write(settings.POSTGRES_PASSWORD + "\n")
    password_file = Path(pwfile.name)
    try:
        _give_to(password_file, user)
        result = subprocess.run(
            _as_server_user(
                [
                    str(bindir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    "postgres",
                    f"--pwfile={password_file}",
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    "--encoding=UTF8",
                    "--locale=C",
                ],
                user,
            ),
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        password_file.unlink(missing_ok=True)
    if result.returncode != 0:
        raise LaunchError(f"initdb failed:\n{result.stderr[-2000:]}", f"remove {data} and run `make up` again")


def server_command(bindir: Path, settings: Settings) -> list[str]:
    """The server in the foreground, for the supervisor."""
    data, run = _paths(settings)
    return [
        str(bindir / "postgres"),
        "-D",
        str(data),
        "-p",
        str(settings.POSTGRES_PORT),
        "-c",
        f"listen_addresses={settings.POSTGRES_HOST}",
        "-c",
        f"unix_socket_directories={run}",
        "-c",
        "max_connections=300",
        "-c",
        "shared_buffers=256MB",
        "-c",
        "log_min_messages=warning",
        # Logical decoding, for RELAY=debezium's connectors; set always, so that switching relays
        # needs no restart of the cluster.
        "-c",
        "wal_level=logical",
        "-c",
        "max_replication_slots=16",
        "-c",
        "max_wal_senders=16",
    ]


def wait_until_ready(url: str, timeout: float, still_starting: Callable[[], None] = lambda: None) -> None:
    """Return once a connection to `url` succeeds."""
    deadline = time.monotonic() + timeout
    last_error = "no answer"
    while time.monotonic() < deadline:
        still_starting()
        try:
            with psycopg.connect(url, connect_timeout=2) as connection:
                connection.execute("SELECT 1")
                return
        except psycopg.OperationalError as error:
            last_error = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            time.sleep(0.2)
    raise LaunchError(
        f"PostgreSQL at {redact(url)} did not answer within {timeout:.0f} s ({last_error})",
        "start that server or fix DATABASE_URL; unset DATABASE_URL to let `make up` run its own",
    )
