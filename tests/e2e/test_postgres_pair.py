"""The launcher's PostgreSQL pair on its own (`make up POSTGRES=ha --infra-only`, ports and state of
its own): what a commit that returned is worth in a failover, synchronous and asynchronous, and
how `make up` and `make db` deal with a pair left half failed over or asked for what it is not."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest

from infra.launcher import postgres_cluster, postgres_pair
from infra.launcher.supervisor import Supervisor
from tests.support.launcher_run import LauncherRun

ROWS = 300


@pytest.fixture(scope="module")
def pair() -> Iterator[LauncherRun]:
    run = LauncherRun()
    run.overrides["POSTGRES"] = "ha"
    run.overrides["POSTGRES_PASSWORD"] = "it's a \\ pass word"  # quoted and escaped on every path
    started = run.launcher("up", "--infra-only")
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        yield run
    finally:
        run.launcher("down")
        run.remove()


def _table(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("CREATE TABLE IF NOT EXISTS acknowledged (n int PRIMARY KEY)")
        connection.execute("TRUNCATE acknowledged")


def _write(url: str, count: int, acknowledged: list[int], stop: threading.Event) -> None:
    """Insert rows one commit each, through both nodes; note each whose commit returned. A lost
    connection is replaced, as every process of the platform does."""
    n = 0
    while n < count and not stop.is_set():
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=3) as connection:
                while n < count and not stop.is_set():
                    connection.execute("INSERT INTO acknowledged (n) VALUES (%s) ON CONFLICT DO NOTHING", (n,))
                    acknowledged.append(n)
                    n += 1
        except psycopg.OperationalError:
            n += 1  # this row's commit may or may not have happened: it was not acknowledged


def _present(url: str) -> set[int]:
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as connection:
        return {row[0] for row in connection.execute("SELECT n FROM acknowledged")}


def test_every_commit_that_returned_survives_a_failover_to_a_synchronous_standby(pair: LauncherRun) -> None:
    settings = pair.settings()
    url = settings.admin_database_url
    _table(url)
    acknowledged: list[int] = []
    stop = threading.Event()
    writer = threading.Thread(target=_write, args=(url, ROWS, acknowledged, stop))
    writer.start()
    try:
        while len(acknowledged) < ROWS // 3 and writer.is_alive():
            stop.wait(0.01)
        failover = pair.launcher("db", "failover")
    finally:
        writer.join(timeout=120)
        stop.set()
    assert failover.returncode == 0 and "synchronous standby" in failover.stdout, failover.stdout + failover.stderr
    assert len(acknowledged) > ROWS // 2, "the writer went on through the failover"
    assert set(acknowledged) <= _present(url)


def test_an_asynchronous_standby_left_behind_loses_commits_that_had_returned(pair: LauncherRun) -> None:
    settings = pair.settings()
    url = settings.admin_database_url
    _table(url)
    assert pair.launcher("db", "sync-off").returncode == 0
    try:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("INSERT INTO acknowledged (n) VALUES (-1)")
        running, _ = postgres_pair.running_pair(settings)
        while postgres_pair.unreplicated_bytes(running) > 0:
            threading.Event().wait(0.05)
        assert pair.launcher("db", "detach-standby").returncode == 0
        acknowledged: list[int] = []
        _write(url, 50, acknowledged, threading.Event())
        assert acknowledged == list(range(50)), "asynchronous: every commit returned without the standby"
        failover = pair.launcher("db", "failover")
        assert failover.returncode == 0 and "asynchronous standby" in failover.stdout, failover.stderr
        assert _present(url) == {-1}, "what the standby had received survived, and nothing after it"
    finally:
        assert pair.launcher("db", "sync-on").returncode == 0


def test_a_failover_interrupted_before_its_promotion_is_finished_by_the_next_up(pair: LauncherRun) -> None:
    settings = postgres_pair.running_pair(pair.settings())[0]
    supervisor = Supervisor(settings.EO_STATE_DIR)
    old, new = postgres_pair.primary_node(settings), postgres_pair.standby_node(settings)
    _table(settings.admin_database_url)
    with psycopg.connect(settings.admin_database_url, autocommit=True) as connection:
        connection.execute("INSERT INTO acknowledged (n) VALUES (7)")
    # What failover() does up to its promotion, then stop: the launcher died there.
    data = postgres_cluster.data_dir(settings, old)
    (data / "standby.signal").touch()
    postgres_cluster.give_to(data / "standby.signal", postgres_cluster.server_user())
    postgres_pair.kill_process_tree(int(supervisor.info(postgres_cluster.node_names(settings)[old - 1])["pid"]))
    (settings.EO_STATE_DIR / "postgres" / f"rebuild-node-{old}").write_text("")
    (settings.EO_STATE_DIR / "postgres" / "primary").write_text(f"{new}\n")

    again = pair.launcher("up", "--infra-only")
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"promoting node {new}" in again.stdout and f"rebuilding PostgreSQL node {old}" in again.stdout
    roles = {node.node: node.role for node in postgres_pair.nodes(settings, supervisor)}
    assert roles == {new: "primary", old: "standby"}, roles
    assert 7 in _present(settings.admin_database_url)


def test_a_failover_whose_rebuild_did_not_finish_is_finished_by_the_next_failover(pair: LauncherRun) -> None:
    """A failover that promoted its standby and could not rebuild the old primary leaves a primary
    with no standby: every synchronous commit waits. The next failover rebuilds it first."""
    settings = postgres_pair.running_pair(pair.settings())[0]
    supervisor = Supervisor(settings.EO_STATE_DIR)
    names = postgres_cluster.node_names(settings)
    old, new = postgres_pair.primary_node(settings), postgres_pair.standby_node(settings)
    _table(settings.admin_database_url)
    with psycopg.connect(settings.admin_database_url, autocommit=True) as connection:
        connection.execute("INSERT INTO acknowledged (n) VALUES (8)")
    # What failover() does up to its promotion; then the old primary's rebuild fails, stopped.
    postgres_pair.kill_process_tree(int(supervisor.info(names[old - 1])["pid"]))
    (settings.EO_STATE_DIR / "postgres" / f"rebuild-node-{old}").write_text("")
    (settings.EO_STATE_DIR / "postgres" / "primary").write_text(f"{new}\n")
    supervisor.stop(names[old - 1])
    with psycopg.connect(postgres_pair.node_url(settings, new), autocommit=True) as connection:
        connection.execute("SELECT pg_promote(true, 60)")

    again = pair.launcher("db", "failover")
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"node {old}: finishing the rebuild an earlier failover began" in again.stdout, again.stdout
    assert f"node {new} SIGKILLed; promoting node {old}" in again.stdout, again.stdout
    roles = {node.node: node.role for node in postgres_pair.nodes(settings, supervisor)}
    assert roles == {old: "primary", new: "standby"}, roles
    assert 8 in _present(settings.admin_database_url)


def test_make_db_acts_only_on_a_pair_and_one_server_does_not_start_from_a_standby(pair: LauncherRun) -> None:
    lone = LauncherRun()
    try:
        refused = lone.launcher("db", "failover")
        assert refused.returncode == 2 and "no PostgreSQL pair runs here" in refused.stderr, refused.stderr
        assert "make up POSTGRES=ha" in refused.stderr
    finally:
        lone.remove()
    settings = pair.settings()
    if postgres_pair.primary_node(settings) == 1:  # make node 2 the primary
        assert pair.launcher("db", "failover").returncode == 0
    pair.overrides["POSTGRES"] = "single"
    try:
        running = pair.launcher("up", "--infra-only")
        assert running.returncode == 2 and "not POSTGRES=single" in running.stderr, running.stdout + running.stderr
        pair.launcher("down")
        stopped = pair.launcher("up", "--infra-only")
        assert stopped.returncode == 2 and "node 1's data is a standby" in stopped.stderr, stopped.stderr
        assert "make up POSTGRES=ha" in stopped.stderr
    finally:
        pair.overrides["POSTGRES"] = "ha"
    back = pair.launcher("up", "--infra-only")
    assert back.returncode == 0, back.stdout + back.stderr
    roles = {node.node: node.role for node in postgres_pair.nodes(settings, Supervisor(settings.EO_STATE_DIR))}
    assert roles == {2: "primary", 1: "standby"}, roles
