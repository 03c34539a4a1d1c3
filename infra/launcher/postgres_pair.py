"""POSTGRES=ha: two PostgreSQL nodes, a primary and its streaming standby, and their failover.

The standby is a base backup of the primary (`pg_basebackup`) that streams its write-ahead log
through a physical replication slot. Which node is the primary is written down in the state
directory (`postgres/primary`), so that `make up` after any interruption knows whom to follow:

- `start_pair` starts the primary, promotes it if a failover stopped before its promotion,
  rebuilds the other node as its standby when it is not one (first start, or a former primary),
  waits until the standby streams, and sets the replication mode (POSTGRES_SYNC).
- `failover` does what losing the primary's machine does, then what an operator (or Patroni)
  does after it: the primary is marked so that it can only come back read-only, SIGKILLed with
  every process of its own, the standby promoted, and the old primary rebuilt as the new one's
  standby, so that failovers can repeat. The failover is logged once the standby is promoted;
  a rebuild that fails or outlasts STREAMING_TIMEOUT is finished by the next failover or `make up`.
- `detach_standby` stops the standby's WAL receiver (`attach_standby` starts it again): the
  staging of docs/postgres-failover.md's lab, in which an asynchronous standby falls behind.

Every process connects with both nodes' addresses and target_session_attrs=read-write
(Settings.admin_database_url), so after a promotion each one's next connection finds the new primary.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import psycopg

from infra.launcher import postgres_cluster, process_table
from infra.launcher.errors import LaunchError
from infra.launcher.supervisor import Supervisor
from services.settings import Settings

Say = Callable[[str], None]
STREAMING_TIMEOUT = 120.0


@dataclass(frozen=True)
class NodeState:
    """One node as `make db` and the panel show it."""

    node: int
    process: str
    port: int
    state: str
    """The supervisor's: RUNNING, STOPPED, BACKOFF, …"""
    role: str
    """primary, standby, or unknown (not answering)."""
    replication: str
    """The primary: its standby's state and how far behind it is; the standby: streaming or detached."""
    behind_bytes: int | None = None
    """The primary: how much write-ahead log its standby has yet to replay (None: no standby streams)."""
    waiting_commits: int = 0
    """The primary: commits written and waiting for a synchronous standby to confirm them."""
    synchronous_standby: bool = False
    """The primary: a standby streams and confirms its commits (pg_stat_replication's sync_state)."""


@dataclass(frozen=True)
class Failover:
    """What one failover did, as the failover log keeps it."""

    at: str
    """When the primary was killed (UTC, ISO 8601): the rewind's reference."""
    old_primary: int
    new_primary: int
    synchronous: bool
    unreplicated_bytes: int
    """Write-ahead log the primary had written and the standby had not received when it was killed:
    with a synchronous standby, what it holds is only work whose commit had not yet returned."""
    promoted_after_seconds: float
    rebuilt_after_seconds: float | None
    """None: the old primary's rebuild did not finish then (the next failover or `make up` finishes it)."""

    def describe(self) -> str:
        mode = "synchronous" if self.synchronous else "asynchronous"
        rebuilt = (
            f"node {self.old_primary} not rebuilt yet"
            if self.rebuilt_after_seconds is None
            else f"node {self.old_primary} rebuilt as its standby in {self.rebuilt_after_seconds:.1f} s"
        )
        return (
            f"failover at {self.at}: node {self.old_primary} SIGKILLed, node {self.new_primary} promoted in "
            f"{self.promoted_after_seconds:.1f} s ({mode} standby, {self.unreplicated_bytes} bytes of WAL "
            f"unreplicated); {rebuilt}"
        )


# Where the pair's facts are kept ------------------------------------------------------------


def _primary_record(settings: Settings) -> Path:
    return postgres_cluster.root_dir(settings) / "primary"


def _rebuild_record(settings: Settings, node: int) -> Path:
    return postgres_cluster.root_dir(settings) / f"rebuild-node-{node}"


def failover_log(settings: Settings) -> Path:
    """One JSON line per failover (Failover's fields), oldest first."""
    return postgres_cluster.root_dir(settings) / "failovers.jsonl"


def primary_node(settings: Settings) -> int:
    """The node that is (or, stopped, will be started as) the primary: 1 until a failover."""
    try:
        return int(_primary_record(settings).read_text().strip())
    except (OSError, ValueError):
        return 1


def standby_node(settings: Settings) -> int:
    return 2 if primary_node(settings) == 1 else 1


def failovers(settings: Settings) -> list[Failover]:
    try:
        lines = failover_log(settings).read_text().splitlines()
    except OSError:
        return []
    return [Failover(**json.loads(line)) for line in lines if line.strip()]


def _write(path: Path, text: str) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text)
    temporary.replace(path)


# Talking to one node ------------------------------------------------------------------------


def node_url(settings: Settings, node: int) -> str:
    """The superuser's URL of node `node` alone (either role)."""
    password = quote(settings.POSTGRES_PASSWORD, safe="")
    return (
        f"postgresql://postgres:{password}@{settings.POSTGRES_HOST}:{settings.postgres_node_ports[node - 1]}/postgres"
    )


def _query(settings: Settings, node: int, sql: str, timeout: float = 3) -> list[tuple[object, ...]]:
    with psycopg.connect(node_url(settings, node), connect_timeout=max(1, int(timeout)), autocommit=True) as c:
        return list(c.execute(sql).fetchall())


def _execute(settings: Settings, node: int, *statements: str) -> None:
    with psycopg.connect(node_url(settings, node), connect_timeout=5, autocommit=True) as connection:
        for statement in statements:
            connection.execute(statement)


def in_recovery(settings: Settings, node: int) -> bool | None:
    """Whether node `node` is a standby now; None when it does not answer."""
    try:
        return bool(_query(settings, node, "SELECT pg_is_in_recovery()")[0][0])
    except psycopg.Error:
        return None


def _application_name(node: int) -> str:
    return f"node-{node}"


def _slot(node: int) -> str:
    return f"standby_node_{node}"


def primary_conninfo(settings: Settings, standby: int) -> str:
    """How standby `standby` reaches the primary: the other node, as the superuser, by name."""
    primary = 2 if standby == 1 else 1
    password = settings.POSTGRES_PASSWORD.replace("\\", "\\\\").replace("'", "\\'")
    return (
        f"host={settings.POSTGRES_HOST} port={settings.postgres_node_ports[primary - 1]} user=postgres "
        f"password='{password}' application_name={_application_name(standby)}"
    )


def _literal(text: str) -> str:
    """`text` as an SQL string literal (standard_conforming_strings: only quotes doubled)."""
    return "'" + text.replace("'", "''") + "'"


def _configuration_value(text: str) -> str:
    """`text` as a quoted value of a configuration file, which reads backslash escapes too."""
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


# Building and starting the pair -------------------------------------------------------------


def rebuild_standby(bindir: Path, settings: Settings, supervisor: Supervisor, node: int, say: Say) -> None:
    """Replace node `node`'s data with a fresh base backup of the primary, as its standby, through
    a physical slot of its own; the node is stopped first and not started (`bring_back_as_standby`
    starts it and waits until it streams)."""
    primary = 2 if node == 1 else 1
    supervisor.stop(postgres_cluster.node_names(settings)[node - 1])
    data = postgres_cluster.data_dir(settings, node)
    say(f"rebuilding PostgreSQL node {node} as node {primary}'s standby (a base backup)")
    shutil.rmtree(data, ignore_errors=True)
    data.parent.mkdir(parents=True, exist_ok=True)
    user = postgres_cluster.server_user()
    slot = _slot(node)
    deadline = time.monotonic() + 30
    while True:  # a walsender of the node's last life may hold its slot a moment longer
        try:
            _execute(
                settings,
                primary,
                f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '{slot}'",
            )
            break
        except psycopg.errors.ObjectInUse:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    backup = subprocess.run(
        postgres_cluster.as_server_user(
            [
                str(bindir / "pg_basebackup"),
                "--pgdata",
                str(data),
                "--dbname",
                f"host={settings.POSTGRES_HOST} port={settings.postgres_node_ports[primary - 1]} user=postgres",
                "--wal-method=stream",
                "--checkpoint=fast",
                "--create-slot",
                "--slot",
                slot,
                "--no-password",
            ],
            user,
        ),
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PGPASSWORD": settings.POSTGRES_PASSWORD},
    )
    if backup.returncode != 0:
        raise LaunchError(
            f"pg_basebackup of node {primary} into node {node} failed:\n{backup.stderr[-2000:]}",
            f"read node {primary}'s log (`make logs`), then `make up` again: it rebuilds the standby",
        )
    (data / "standby.signal").touch()
    with (data / "postgresql.auto.conf").open("a") as configuration:
        configuration.write(f"primary_conninfo = {_configuration_value(primary_conninfo(settings, node))}\n")
        configuration.write(f"primary_slot_name = '{slot}'\n")
    postgres_cluster.give_to(data / "standby.signal", user)
    postgres_cluster.give_to(data / "postgresql.auto.conf", user)


def _needs_rebuild(settings: Settings, node: int) -> bool:
    data = postgres_cluster.data_dir(settings, node)
    return (
        _rebuild_record(settings, node).exists()
        or not (data / "PG_VERSION").exists()
        or not (data / "standby.signal").exists()
    )


def wait_until_streaming(settings: Settings, standby: int, timeout: float, still_starting: Callable[[], None]) -> None:
    """Return once the primary sees standby `standby` streaming."""
    primary = 2 if standby == 1 else 1
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        still_starting()
        try:
            rows = _query(
                settings,
                primary,
                "SELECT state FROM pg_stat_replication "
                f"WHERE application_name = '{_application_name(standby)}' AND state = 'streaming'",
            )
            if rows:
                return
        except psycopg.Error:
            pass
        time.sleep(0.2)
    raise LaunchError(
        f"PostgreSQL node {standby} did not stream from node {primary} within {timeout:.0f} s",
        "read both nodes' logs (`make logs`); `make up` again rebuilds the standby if it cannot follow",
    )


def bring_back_as_standby(
    bindir: Path, settings: Settings, supervisor: Supervisor, node: int, say: Say, still_starting: Callable[[], None]
) -> None:
    """Start node `node` as the primary's standby, rebuilding it first when it is not one (or a
    rebuild of it was begun and not seen through), and return once it streams. Only then is the
    rebuild it needed forgotten: a failover or `make up` interrupted anywhere before finishes it."""
    if _needs_rebuild(settings, node):
        _write(_rebuild_record(settings, node), "")
        rebuild_standby(bindir, settings, supervisor, node, say)
    supervisor.start(postgres_cluster.node_names(settings)[node - 1])
    say(f"waiting for node {node} to stream from node {2 if node == 1 else 1}")
    wait_until_streaming(settings, node, STREAMING_TIMEOUT, still_starting)
    _rebuild_record(settings, node).unlink(missing_ok=True)


def set_synchronous(settings: Settings, on: bool) -> None:
    """Make every running node's commits wait for the standby (`on`) or not: the primary acts on
    it now, the standby when it is promoted."""
    # By name, so that no other stream (pg_basebackup's, while a standby is rebuilt) counts.
    standbys = ", ".join(f'"{_application_name(node)}"' for node in range(1, len(settings.postgres_node_ports) + 1))
    names = _literal(f"FIRST 1 ({standbys})") if on else "''"
    for node in range(1, len(settings.postgres_node_ports) + 1):
        try:
            _execute(
                settings,
                node,
                f"ALTER SYSTEM SET synchronous_standby_names = {names}",
                "ALTER SYSTEM SET synchronous_commit = 'on'",
                "SELECT pg_reload_conf()",
            )
        except psycopg.OperationalError:
            continue  # a node that is down takes the setting from its base backup when rebuilt


def is_synchronous(settings: Settings) -> bool:
    rows = _query(settings, primary_node(settings), "SHOW synchronous_standby_names")
    return bool(str(rows[0][0]).strip())


def start_pair(
    bindir: Path,
    settings: Settings,
    supervisor: Supervisor,
    say: Say,
    watch: Callable[[str], Callable[[], None]],
) -> None:
    """Start the primary and its standby (idempotent), finishing a failover an interruption left."""
    primary, standby = primary_node(settings), standby_node(settings)
    names = postgres_cluster.node_names(settings)
    for node in (primary, standby):
        if (postgres_cluster.data_dir(settings, node) / "postgresql.conf").exists():
            postgres_cluster.write_settings_into_configuration(postgres_cluster.data_dir(settings, node))
    supervisor.start(names[primary - 1])
    postgres_cluster.wait_until_ready(node_url(settings, primary), 60, watch(names[primary - 1]))
    if in_recovery(settings, primary):
        say(f"promoting node {primary}: a failover to it stopped before its promotion")
        _promote(settings, primary)
    bring_back_as_standby(bindir, settings, supervisor, standby, say, watch(names[standby - 1]))
    set_synchronous(settings, settings.POSTGRES_SYNC == "on")


def running_pair(settings: Settings) -> tuple[Settings, Supervisor]:
    """The settings of the pair that runs (POSTGRES=ha, whatever the environment says now) and its
    supervisor; a LaunchError when no pair runs."""
    if not settings.uses_own_postgres:
        raise LaunchError(
            "the PostgreSQL pair's faults act on the nodes the launcher runs; DATABASE_URL points elsewhere",
            "unset DATABASE_URL, or fail your own servers over with your own tools",
        )
    supervisor = Supervisor(settings.EO_STATE_DIR)
    running = {info["name"] for info in supervisor.all_info()} if supervisor.is_running() else set()
    pair = settings.model_copy(update={"POSTGRES": "ha"})
    if not set(postgres_cluster.node_names(pair)) <= running:
        raise LaunchError("no PostgreSQL pair runs here", "`make up POSTGRES=ha` starts a primary and its standby")
    return pair, supervisor


# Breaking it --------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    return [child for child, fields in process_table.stat_fields() if int(fields[1]) == pid]


def kill_process_tree(pid: int) -> None:
    """SIGKILL `pid` and every process under it, as a machine's loss would end them."""
    tree, index = [pid], 0
    while index < len(tree):
        tree.extend(_children(tree[index]))
        index += 1
    for each in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(each, signal.SIGKILL)


def _lsn(text: object) -> int:
    high, low = str(text).split("/")
    return (int(high, 16) << 32) + int(low, 16)


def unreplicated_bytes(settings: Settings) -> int:
    """How much write-ahead log the primary has that the standby has not received (0 when unknown)."""
    try:
        written = _query(settings, primary_node(settings), "SELECT pg_current_wal_insert_lsn()")[0][0]
        received = _query(
            settings,
            standby_node(settings),
            "SELECT coalesce(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())",
        )[0][0]
    except psycopg.Error:
        return 0
    return max(0, _lsn(written) - _lsn(received))


def failover(bindir: Path, settings: Settings, supervisor: Supervisor, say: Say) -> Failover:
    """SIGKILL the primary, promote the standby, rebuild the old primary as the new one's standby.

    A failover that stopped after its promotion (its standby's rebuild failed or was slow past
    STREAMING_TIMEOUT) left the primary with no standby, every synchronous commit waiting: the
    next one finishes that rebuild before anything else. Every failure is a LaunchError."""
    try:
        _finish_an_earlier_rebuild(bindir, settings, supervisor, say)
        return _fail_over(bindir, settings, supervisor, say)
    except psycopg.Error as error:
        raise LaunchError(
            f"the failover stopped: {type(error).__name__}: {error}".strip(),
            "`make db` shows the nodes; `make db failover` again finishes a standby's rebuild first",
        ) from error


def _finish_an_earlier_rebuild(bindir: Path, settings: Settings, supervisor: Supervisor, say: Say) -> None:
    standby = standby_node(settings)
    if _rebuild_record(settings, standby).exists():
        say(f"node {standby}: finishing the rebuild an earlier failover began")
        bring_back_as_standby(bindir, settings, supervisor, standby, say, lambda: None)


def _fail_over(bindir: Path, settings: Settings, supervisor: Supervisor, say: Say) -> Failover:
    old, new = primary_node(settings), standby_node(settings)
    names = postgres_cluster.node_names(settings)
    if in_recovery(settings, new) is not True:
        raise LaunchError(
            f"node {new} is not a running standby: there is nothing to promote",
            "`make db` shows the nodes; `make up POSTGRES=ha` starts the standby again",
        )
    synchronous = is_synchronous(settings)
    lost = unreplicated_bytes(settings)
    # A supervisor restarting the killed node must not bring a second primary up: marked as a
    # standby, it can only come back read-only, and target_session_attrs=read-write passes it by.
    old_data = postgres_cluster.data_dir(settings, old)
    (old_data / "standby.signal").touch()
    postgres_cluster.give_to(old_data / "standby.signal", postgres_cluster.server_user())
    pid = int(supervisor.info(names[old - 1])["pid"])
    killed_at = datetime.now(UTC)
    started = time.monotonic()
    if pid:
        kill_process_tree(pid)
    _write(_rebuild_record(settings, old), "")
    _write(_primary_record(settings), f"{new}\n")
    say(f"node {old} SIGKILLed; promoting node {new}")
    _promote(settings, new)
    done = Failover(
        at=killed_at.isoformat(),
        old_primary=old,
        new_primary=new,
        synchronous=synchronous,
        unreplicated_bytes=lost,
        promoted_after_seconds=round(time.monotonic() - started, 2),
        rebuilt_after_seconds=None,
    )
    try:
        set_synchronous(settings, synchronous)
        bring_back_as_standby(bindir, settings, supervisor, old, say, lambda: None)
        done = replace(done, rebuilt_after_seconds=round(time.monotonic() - started, 2))
    finally:  # the failover happened either way: the rewind needs its time
        with failover_log(settings).open("a") as log:
            log.write(json.dumps(asdict(done)) + "\n")
    return done


def _promote(settings: Settings, node: int, timeout: float = 120) -> None:
    """Promote standby `node` and return once it takes writes."""
    _execute(settings, node, "SELECT pg_promote(false)")
    deadline = time.monotonic() + timeout
    while in_recovery(settings, node) is not False:
        if time.monotonic() > deadline:
            raise LaunchError(
                f"node {node} was asked to promote itself and is still not a primary after {timeout:.0f} s",
                "read its log (`make logs`); `make up POSTGRES=ha` promotes it when it is back",
            )
        time.sleep(0.1)


def detach_standby(settings: Settings) -> str:
    """Stop the standby's WAL receiver: it keeps what it has and receives nothing more."""
    standby = standby_node(settings)
    _execute(settings, standby, "ALTER SYSTEM SET primary_conninfo = ''", "SELECT pg_reload_conf()")
    return f"node {standby}'s WAL receiver stopped: it falls behind node {primary_node(settings)} from now on"


def attach_standby(settings: Settings) -> str:
    """Start the standby's WAL receiver again; it catches up through its slot."""
    standby = standby_node(settings)
    conninfo = _literal(primary_conninfo(settings, standby))
    _execute(settings, standby, f"ALTER SYSTEM SET primary_conninfo = {conninfo}", "SELECT pg_reload_conf()")
    return f"node {standby} streams from node {primary_node(settings)} again"


SYNC_WAITS = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"


def nodes(settings: Settings, supervisor: Supervisor) -> list[NodeState]:
    """Each node: its process, the supervisor's state, its role and its replication."""
    names = postgres_cluster.node_names(settings)
    states = {info["name"]: info["statename"] for info in supervisor.all_info()}
    shown = []
    for node, name in enumerate(names, start=1):
        recovering = in_recovery(settings, node)
        role = "unknown" if recovering is None else ("standby" if recovering else "primary")
        replication, behind, waiting, confirming = "", None, 0, False
        try:
            if role == "primary":
                rows = _query(
                    settings,
                    node,
                    "SELECT application_name, state, sync_state, "
                    "pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::bigint FROM pg_stat_replication",
                )
                replication = "; ".join(f"{r[0]} {r[1]} ({r[2]}), {r[3] or 0} bytes behind" for r in rows)
                replication = replication or "no standby connected"
                streaming = [int(str(r[3] or 0)) for r in rows if r[1] == "streaming"]
                behind = max(streaming) if streaming else None
                confirming = any(r[1] == "streaming" and r[2] in ("sync", "quorum") for r in rows)
                waiting = int(str(_query(settings, node, SYNC_WAITS)[0][0]))
            elif role == "standby":
                rows = _query(settings, node, "SELECT status FROM pg_stat_wal_receiver")
                replication = str(rows[0][0]) if rows else "detached: no WAL receiver"
        except psycopg.Error as error:
            replication = f"{type(error).__name__}"
        shown.append(
            NodeState(
                node=node,
                process=name,
                port=settings.postgres_node_ports[node - 1],
                state=states.get(name, "UNKNOWN"),
                role=role,
                replication=replication,
                behind_bytes=behind,
                waiting_commits=waiting,
                synchronous_standby=confirming,
            )
        )
    return shown
