"""The native launcher's command line: `python -m infra.launcher up|down|status|logs|broker|provision|...`.

The Makefile calls it; every failure a person can fix is printed as what went wrong and how to
fix it, with exit status 2, never as a stack trace.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from datetime import UTC, datetime, timedelta

from pydantic import ValidationError

from auditor import kafka_side
from auditor.dead_letters import read_dead_letters
from auditor.invariants import database_reader
from chaos_panel.acting.control_endpoints import ControlError, ControlPlane
from infra.launcher import (
    broker_chaos,
    kafka_broker,
    kafka_connect,
    kafka_principals,
    postgres_cluster,
    postgres_pair,
    processes,
    stack,
)
from infra.launcher.errors import LaunchError
from infra.launcher.provisioning import provision
from services.kafka_access import ADMIN, OPERATOR, PRINCIPALS
from services.settings import Settings
from services.topology import database


def _say(message: str) -> None:
    print(f"  · {message}", flush=True)


def _up(settings: Settings, arguments: argparse.Namespace) -> int:
    started = time.monotonic()
    print("effectively-once: bringing the native stack up (no Docker engine needed)", flush=True)
    stack.up(settings, _say, with_platform=not arguments.infra_only)
    print(f"\nhealthy in {time.monotonic() - started:.1f} s:")
    for label, url in stack.urls(settings, with_platform=not arguments.infra_only).items():
        print(f"  {label:<26} {url}")
    print("\n`make status` shows each process, `make logs` follows their logs, `make down` stops all.")
    return 0


def _down(settings: Settings, _: argparse.Namespace) -> int:
    if stack.down(settings, _say):
        print("effectively-once: stopped; nothing is left running.")
    else:
        print("effectively-once: nothing was running.")
    return 0


def _restart(settings: Settings, _: argparse.Namespace) -> int:
    if not stack.restart(settings, _say):
        print("effectively-once: not running (`make up` starts it).")
        return 3
    print("effectively-once: every platform process restarted and healthy.")
    return 0


def _status(settings: Settings, _: argparse.Namespace) -> int:
    rows = stack.status(settings)
    if not rows:
        print("effectively-once: not running (`make up` starts it).")
        return 3
    for row in rows:
        print(f"  {row['name']:<24} {row['state']:<10} {row['detail']}")
    return 0 if all(row["state"] == "RUNNING" for row in rows) else 1


def _logs(settings: Settings, arguments: argparse.Namespace) -> int:
    logs = settings.EO_STATE_DIR / "logs"
    files = sorted(str(path) for path in logs.glob("*.log")) if logs.is_dir() else []
    if not files:
        print(f"effectively-once: no logs yet in {logs} (`make up` starts the stack).")
        return 0
    follow = ["-F"] if arguments.follow else []
    os.execvp("tail", ["tail", "-n", str(arguments.lines), *follow, *files])


def _broker(settings: Settings, arguments: argparse.Namespace) -> int:
    """Show the running cluster's nodes, or break it: kill a partition's leader, freeze a node,
    restart the active controller."""
    cluster, supervisor = broker_chaos.running_cluster(settings)
    if arguments.action == "kill-leader":
        topic, _, partition = arguments.target.rpartition("/")
        if not topic or not partition.isdigit():
            raise LaunchError(f"{arguments.target!r} is not a partition", "name one as topic/number: orders.events/0")
        print(broker_chaos.kill_leader(cluster, supervisor, topic, int(partition)).describe())
    elif arguments.action == "freeze":
        if not arguments.target.isdigit() or not 1 <= int(arguments.target) <= cluster.BROKERS:
            raise LaunchError(f"{arguments.target!r} is not a node", f"name one of 1 to {cluster.BROKERS}")
        print(broker_chaos.freeze(cluster, supervisor, int(arguments.target), arguments.seconds).describe())
        print(f"(this command ends when the node thaws, in {arguments.seconds:g} s)", flush=True)
    elif arguments.action == "restart-controller":
        print(broker_chaos.restart_controller(cluster, supervisor).describe())
    else:
        controller = broker_chaos.active_controller(cluster)
        states = {info["name"]: info["statename"] for info in supervisor.all_info()}
        for node, partitions in sorted(broker_chaos.leaders(cluster).items()):
            name = broker_chaos.process_of(cluster, node) if 1 <= node <= cluster.BROKERS else f"node {node}"
            role = "active controller" if node == controller else ""
            print(f"  {name:<8} {states.get(name, '?'):<8} {role:<17}  leads {len(partitions)}: {' '.join(partitions)}")
    return 0


REWIND_MARGIN = timedelta(seconds=30)
"""How far before the first lost message `db rewind` goes back: replayed messages that survived are
duplicates, which the markers absorb."""


def _db(settings: Settings, arguments: argparse.Namespace) -> int:
    """Show the PostgreSQL pair, or act on it: fail over, detach or attach the standby, switch the
    replication mode, rewind every consumer to before the last failover."""
    if arguments.action == "rewind":
        return _rewind(settings, arguments.target, arguments.ghosts_too)
    pair, supervisor = postgres_pair.running_pair(settings)
    if arguments.action == "failover":
        bindir = postgres_cluster.find_bindir()
        if bindir is None:
            raise LaunchError("no PostgreSQL server binaries found", "set PG_BINDIR")
        print(postgres_pair.failover(bindir, pair, supervisor, _say).describe())
    elif arguments.action == "detach-standby":
        print(postgres_pair.detach_standby(pair))
    elif arguments.action == "attach-standby":
        print(postgres_pair.attach_standby(pair))
    elif arguments.action in ("sync-on", "sync-off"):
        postgres_pair.set_synchronous(pair, arguments.action == "sync-on")
        print("commits wait for the standby" if arguments.action == "sync-on" else "the standby follows asynchronously")
    else:
        if postgres_pair.is_synchronous(pair):
            print("  a primary and a synchronous standby (POSTGRES_SYNC=on now)")
        else:
            print("  a primary and an asynchronous standby (POSTGRES_SYNC=off now)")
        for node in postgres_pair.nodes(pair, supervisor):
            print(f"  {node.process:<11} {node.state:<8} {node.role:<8} port {node.port}  {node.replication}")
        for failover in postgres_pair.failovers(pair):
            print(f"  {failover.describe()}")
    return 0


def _rewind(settings: Settings, target: str, ghosts_too: bool) -> int:
    """Rewind every consumer process to `target` (ISO 8601), or to before the first message a group
    acknowledged and lost. Refused while a ghost order (a phantom OrderPlaced) lies after that
    point, unless `ghosts_too`: a replay would reserve, charge and mail an order that is gone."""
    with contextlib.suppress(LaunchError):  # one server: a rewind is the same
        settings = postgres_pair.running_pair(settings)[0]
    query = database_reader(lambda name: settings.auditor_database_url(database(name)))
    bootstrap = settings.kafka_bootstrap_servers
    side = kafka_side.check(query, bootstrap, read_dead_letters(bootstrap))
    if target:
        try:
            to = datetime.fromisoformat(target.replace("Z", "+00:00"))
        except ValueError as error:
            raise LaunchError(f"{target!r} is not a time", "give one as 2026-12-06T10:00:00Z") from error
        if to.tzinfo is None:
            raise LaunchError(f"{target!r} has no time zone", "end it with Z (UTC) or an offset")
    elif (earliest := side.earliest_lost()) is None:
        print("Nothing a consumer acknowledged is lost: there is nothing to rewind for.")
        return 0
    else:
        to = earliest - REWIND_MARGIN
    ghosts = {p.event.order_id for p in side.phantoms if p.event.event_type == "OrderPlaced" and p.event.at >= to}
    if ghosts and not ghosts_too:
        raise LaunchError(
            f"{len(ghosts)} order(s) placed after {to.isoformat()} are gone from the orders database while their "
            f"OrderPlaced is in Kafka (ghosts: {', '.join(sorted(ghosts)[:5])}{' …' if len(ghosts) > 5 else ''}); "
            "a rewind would reserve, charge and mail them with no order",
            "settle them first (docs/postgres-failover.md#ghost-orders), or rewind with --ghosts-too",
        )
    control = ControlPlane(processes.control_urls(settings), "", "")
    try:
        rewound = control.rewind_every_consumer(to.astimezone(UTC).isoformat())
    except ControlError as error:
        raise LaunchError(str(error), "`make status` shows which process is down; start it and rewind again") from error
    finally:
        control.close()
    for process, partitions in sorted(rewound.items()):
        print(f"  {process:<24} {len(partitions)} partition(s) back to {to.astimezone(UTC).isoformat()}")
    print(
        f"Every consumer replays from there ({len(side.lost)} lost message(s) among what it replays): "
        "what survived is a duplicate, what was lost is applied once."
    )
    return 0


def _prepare(settings: Settings, _: argparse.Namespace) -> int:
    """Fetch and install what `up` needs (PostgreSQL, Kafka's jars, Prometheus), start nothing: one
    step before runs that start several systems at once."""
    stack.prepare(settings, _say)
    print("effectively-once: everything `make up` needs is installed.")
    return 0


def _client_properties(settings: Settings, arguments: argparse.Namespace) -> int:
    """A principal's client properties, for Kafka's own tools (`--command-config`)."""
    names = [ADMIN, *(principal.name for principal in PRINCIPALS)]
    if arguments.principal not in names:
        raise LaunchError(f"{arguments.principal!r} is not a Kafka principal", "name one of " + ", ".join(names))
    principal = settings.kafka_principal(arguments.principal)
    module = "scram.ScramLoginModule" if principal.mechanism.startswith("SCRAM") else "plain.PlainLoginModule"
    print(f"# Kafka client properties of principal {principal.username} (keep them to yourself)")
    print(f"security.protocol={principal.protocol}")
    print(f"sasl.mechanism={principal.mechanism}")
    print(
        f"sasl.jaas.config=org.apache.kafka.common.security.{module} required "
        f'username="{principal.username}" password="{principal.password}";'
    )
    return 0


def _provision(settings: Settings, _: argparse.Namespace) -> int:
    """For docker-compose's one-shot job: roles, databases, migrations, topics, Kafka users and ACLs;
    with RELAY=debezium, the replication slots and the connectors' heartbeat topics too."""
    provision(settings, _say)
    kafka_broker.wait_until_ready(settings.kafka_bootstrap_servers, timeout=60, brokers=settings.BROKERS)
    created = kafka_broker.ensure_topics(settings.kafka_bootstrap_servers)
    kafka_broker.ensure_share_groups(settings.kafka_bootstrap_servers, lock_seconds=settings.SHARE_LOCK_SECONDS)
    _say(f"created {len(created)} topics" if created else "every topic exists")
    kafka_principals.ensure_principals(settings.kafka_bootstrap_servers, settings)
    _say("every Kafka principal has its user and ACLs")
    if settings.kafka_replication_factor > 1:
        kafka_broker.wait_until_replicated(settings.kafka_bootstrap_servers, settings.kafka_replication_factor, 120)
        _say(f"every partition has its {settings.kafka_replication_factor} in-sync replicas")
    if settings.RELAY == "debezium":
        made = kafka_connect.prepare_database(settings)
        _say(f"made replication slots {', '.join(made)}" if made else "every replication slot exists")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.launcher", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start PostgreSQL, Kafka and the platform (idempotent)")
    up.add_argument("--infra-only", action="store_true", help="only PostgreSQL and Kafka")
    up.set_defaults(run=_up)
    commands.add_parser("down", help="stop everything the launcher started").set_defaults(run=_down)
    commands.add_parser("status", help="each supervised process").set_defaults(run=_status)
    commands.add_parser("restart", help="restart the platform's processes (after a code change)").set_defaults(
        run=_restart
    )
    logs = commands.add_parser("logs", help="the processes' logs")
    logs.add_argument("-f", "--follow", action="store_true")
    logs.add_argument("-n", "--lines", type=int, default=40)
    logs.set_defaults(run=_logs)
    broker = commands.add_parser(
        "broker",
        help="the Kafka nodes and what each leads; or kill-leader TOPIC/N, freeze NODE, restart-controller",
    )
    broker.add_argument("action", nargs="?", choices=("show", "kill-leader", "freeze", "restart-controller"))
    broker.add_argument("target", nargs="?", default="", help="kill-leader: topic/partition; freeze: node number")
    broker.add_argument("--seconds", type=float, default=15, help="freeze: how long")
    broker.set_defaults(run=_broker)
    db = commands.add_parser(
        "db",
        help="the PostgreSQL pair (POSTGRES=ha); or failover, detach-standby, attach-standby, sync-on, sync-off, "
        "rewind [TIME]",
    )
    db.add_argument(
        "action",
        nargs="?",
        choices=("show", "failover", "detach-standby", "attach-standby", "sync-on", "sync-off", "rewind"),
    )
    db.add_argument(
        "target", nargs="?", default="", help="rewind: an ISO 8601 time (default: the last failover - 30 s)"
    )
    db.add_argument("--ghosts-too", action="store_true", help="rewind: replay ghost orders' events too")
    db.set_defaults(run=_db)
    commands.add_parser("prepare", help="fetch and install what `up` needs; start nothing").set_defaults(run=_prepare)
    client_properties = commands.add_parser(
        "client-properties", help="a Kafka principal's client properties, for Kafka's tools' --command-config"
    )
    client_properties.add_argument("principal", nargs="?", default=OPERATOR)
    client_properties.set_defaults(run=_client_properties)
    provisioning = commands.add_parser(
        "provision",
        help="roles, databases and migrations at DATABASE_URL; topics at KAFKA_BOOTSTRAP_SERVERS",
    )
    provisioning.set_defaults(run=_provision)
    arguments = parser.parse_args(argv)
    try:
        settings = Settings()
        stack.act_as_admin(settings)
        return int(arguments.run(settings, arguments))
    except ValidationError as error:
        print(f"effectively-once: the configuration is not valid:\n{error}", file=sys.stderr)
        print(
            "  how to fix: correct the variables named above in your environment or .env",
            file=sys.stderr,
        )
        return 2
    except LaunchError as error:
        print(f"\neffectively-once: {arguments.command} failed: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
