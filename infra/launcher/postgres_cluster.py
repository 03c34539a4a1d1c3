"""A PostgreSQL cluster the project owns: Debian's server binaries, our own port and data directory.

Used only when DATABASE_URL is not set. When the launcher runs as root, the server runs as the
`postgres` system user, as PostgreSQL refuses to run as root. With POSTGRES=ha there are two nodes,
each with a data directory of its own; infra/launcher/postgres_pair.py makes one the primary and
the other its streaming standby.
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


def node_names(settings: Settings) -> list[str]:
    """The supervised program of each node: `postgres`, or `postgres-1` and `postgres-2` with POSTGRES=ha."""
    if settings.POSTGRES == "single":
        return ["postgres"]
    return [f"postgres-{node}" for node in range(1, len(settings.postgres_node_ports) + 1)]


def is_node_name(name: str) -> bool:
    return name == "postgres" or (name.startswith("postgres-") and name[len("postgres-") :].isdigit())


def data_dir(settings: Settings, node: int = 1) -> Path:
    """Node `node`'s data directory; node 1's is the single server's, so POSTGRES=ha starts from
    the data a single server left (as the primary)."""
    return root_dir(settings) / ("data" if node == 1 else f"data-{node}")


def root_dir(settings: Settings) -> Path:
    return settings.EO_STATE_DIR / "postgres"


def socket_dir(settings: Settings) -> Path:
    """Where every node's unix socket is (each named by its port): the platform's processes connect
    through it (Settings.admin_database_url)."""
    return settings.postgres_socket_dir


def hba_path(settings: Settings) -> Path:
    """Every node's client authentication file (`hba_file`), written by the launcher at each start."""
    return root_dir(settings) / "pg_hba.conf"


HBA = """\
# Written by the launcher at each start (infra/launcher/postgres_cluster.py); edits are lost.
# A password (scram-sha-256) for every connection, through the unix socket as over TCP.
# TYPE  DATABASE     USER  ADDRESS        METHOD
local   all          all                  scram-sha-256
host    all          all   127.0.0.1/32   scram-sha-256
host    all          all   ::1/128        scram-sha-256
local   replication  all                  scram-sha-256
host    replication  all   127.0.0.1/32   scram-sha-256
host    replication  all   ::1/128        scram-sha-256
"""
"""Who may connect, and how: what initdb writes for a password on TCP, with the same rule on the
unix socket, so that the socket the processes use asks the same password as TCP."""


def write_hba(settings: Settings) -> None:
    path = hba_path(settings)
    if not path.exists() or path.read_text() != HBA:
        path.write_text(HBA)
        give_to(path, server_user())


def as_server_user(command: list[str], user: str | None) -> list[str]:
    return ["runuser", "-u", user, "--", *command] if user else command


def give_to(path: Path, user: str | None) -> None:
    if user:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def ensure_initialised(bindir: Path, settings: Settings, say: Callable[[str], None], node: int = 1) -> None:
    """Run initdb once, for node `node` (the primary): superuser `postgres` with
    POSTGRES_PASSWORD, scram on TCP and on the unix socket (every node reads the launcher's own
    hba file, written here at each start)."""
    data, run = data_dir(settings, node), socket_dir(settings)
    user = server_user()
    for directory in (data.parent, run):
        directory.mkdir(parents=True, exist_ok=True, mode=0o755)
        give_to(directory, user)
    write_hba(settings)
    if (data / "PG_VERSION").exists():
        return
    say("creating the project's PostgreSQL cluster (first run only)")
    with tempfile.NamedTemporaryFile("w", dir=data.parent, delete=False) as pwfile:
        pwfile.write(settings.POSTGRES_PASSWORD + "\n")
    password_file = Path(pwfile.name)
    try:
        give_to(password_file, user)
        result = subprocess.run(
            as_server_user(
                [
                    str(bindir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    "postgres",
                    f"--pwfile={password_file}",
                    "--auth-local=scram-sha-256",
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
    write_settings_into_configuration(data)


SERVER_SETTINGS = {
    "max_connections": "300",
    "shared_buffers": "256MB",
    "log_min_messages": "warning",
    # Logical decoding, for RELAY=debezium's connectors; set always, so that switching relays needs
    # no restart of the cluster.
    "wal_level": "logical",
    "max_replication_slots": "16",
    "max_wal_senders": "16",
    # A standby answers read-only queries while it replays (the launcher asks it how far it is);
    # target_session_attrs=read-write keeps every process's work on the primary.
    "hot_standby": "on",
    # A standby whose primary is gone retries its WAL source this often, and a promotion waits for
    # that retry: PostgreSQL's 5 s default would make every failover 5 s longer.
    "wal_retrieve_retry_interval": "200ms",
    # A standby tells its primary how far it has flushed after each write, and at least this often:
    # a commit that began to wait just as the standby became synchronous waits at most this long.
    "wal_receiver_status_interval": "1s",
}
"""What every node runs with, besides its port, name and directories."""

CONFIGURATION_BLOCK = "# effectively-once: the launcher's settings (infra/launcher/postgres_cluster.py)"


def server_command(bindir: Path, settings: Settings, node: int = 1) -> list[str]:
    """Node `node`'s server in the foreground, for the supervisor. Whether it runs as a primary or
    a standby is its data directory's (a standby has standby.signal and primary_conninfo)."""
    command = [
        str(bindir / "postgres"),
        "-D",
        str(data_dir(settings, node)),
        "-p",
        str(settings.postgres_node_ports[node - 1]),
    ]
    named = {
        "cluster_name": f"node-{node}",
        "listen_addresses": settings.POSTGRES_HOST,
        "unix_socket_directories": str(socket_dir(settings)),
        "hba_file": str(hba_path(settings)),
        **SERVER_SETTINGS,
    }
    for name, value in named.items():
        command += ["-c", f"{name}={value}"]
    return command


def write_settings_into_configuration(data: Path) -> None:
    """Write SERVER_SETTINGS into `data`'s postgresql.conf too (once). The command line wins
    either way, but a reload (POSTGRES=ha's replication settings) compares the file's values of
    settings that need a restart with the running ones, and logs each that differs as an error."""
    configuration = data / "postgresql.conf"
    text = configuration.read_text()
    if CONFIGURATION_BLOCK in text:
        return
    lines = [CONFIGURATION_BLOCK] + [f"{name} = '{value}'" for name, value in SERVER_SETTINGS.items()]
    configuration.write_text(text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n")


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
