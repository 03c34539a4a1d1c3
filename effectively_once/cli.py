"""The runtime's console commands: `effectively-once-migrate`, `effectively-once-purge` and
`effectively-once-horizon` (`effectively-once-relay` is relay/run.py). Each reads DATABASE_URL
(and KAFKA_BOOTSTRAP_SERVERS) when none is given, says what it did line by line, and exits 2 with
the reason on bad input or an unreachable database or broker; the horizon check and a purge it
refuses exit 1.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import psycopg

from . import schema
from .process import ProcessSettings
from .redelivery_windows import read_windows
from .relay.claim import purge_published
from .retention import purge_markers
from .safe_horizon import HorizonUnknown, Verdict, Window, describe, verdict


class CommandSettings(ProcessSettings):
    """What the commands read from the environment where no option is given."""

    DATABASE_URL: str = ""


def _database_url(given: str | None) -> str:
    url = given or CommandSettings().DATABASE_URL
    if not url:
        raise SystemExit("effectively-once: give --database-url or set DATABASE_URL")
    return url


def _own_folder(text: str) -> tuple[str, Path]:
    namespace, sep, folder = text.partition("=")
    if not sep or not namespace or not folder:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAMESPACE=FOLDER (e.g. orders=migrations)")
    return namespace, Path(folder)


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return value


def _window(text: str) -> Window:
    name, sep, hours = text.partition("=")
    if sep and name:
        with contextlib.suppress(argparse.ArgumentTypeError, ValueError):
            return Window(name, _positive(hours) * 3600, "given")
    raise argparse.ArgumentTypeError(f"{text!r} is not NAME=HOURS (e.g. provider-keys=24)")


def _kafka_arguments(parser: argparse.ArgumentParser) -> None:
    kafka = parser.add_argument_group("what could still be delivered again (read from Kafka)")
    kafka.add_argument("--topic", action="append", default=[], help="a topic the consumer reads (repeatable)")
    kafka.add_argument("--group", help="its consumer group (default: the consumer's name)")
    kafka.add_argument("--dead-letter-topic", help="its dead-letter topic (default: dlq.CONSUMER)")
    kafka.add_argument("--bootstrap-servers", help="default: KAFKA_BOOTSTRAP_SERVERS (and KAFKA_USERNAME/PASSWORD)")
    kafka.add_argument(
        "--window", action="append", type=_window, default=[], metavar="NAME=HOURS",
        help="a redelivery window Kafka cannot show, such as a remote side's key lifetime (repeatable)",
    )  # fmt: skip


def _weigh(args: argparse.Namespace, consumer: str, horizon: timedelta) -> Verdict:
    servers = args.bootstrap_servers or CommandSettings().KAFKA_BOOTSTRAP_SERVERS
    if not servers:
        raise SystemExit("effectively-once: give --bootstrap-servers or set KAFKA_BOOTSTRAP_SERVERS")
    dead_letters = args.dead_letter_topic or f"dlq.{consumer}"
    try:
        windows = read_windows(servers, args.group or consumer, tuple(args.topic), dead_letters)
    except HorizonUnknown as error:
        raise SystemExit(f"effectively-once: could not read what could be delivered again: {error}") from error
    return verdict(horizon, [*windows, *args.window])


def _print_verdict(consumer: str, judged: Verdict) -> None:
    print("\n".join([f"redelivery windows for {consumer}:", *describe(judged)]))


def horizon_main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="effectively-once-horizon",
        description="Compute the shortest safe marker retention for one consumer from what could still be "
        "delivered again (its topics' retention, its oldest unacknowledged message, its oldest dead letter, "
        "and any --window) and compare the configured one; exit 1 when it is shorter.",
    )
    parser.add_argument("--consumer", required=True, help="the consumer's name (CONSUMER_NAME)")
    parser.add_argument("--horizon-days", type=_positive, default=30.0, help="the retention it runs with")
    _kafka_arguments(parser)
    args = parser.parse_args(argv)
    if not args.topic:
        parser.error("give at least one --topic the consumer reads")
    judged = _weigh(args, args.consumer, timedelta(days=args.horizon_days))
    _print_verdict(args.consumer, judged)
    if not judged.safe:
        raise SystemExit(1)


def migrate_main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="effectively-once-migrate",
        description="Create the runtime's tables (processed_message, outbox, consumer_setting, "
        "marker_retention), then apply your own numbered migrations; each at most once.",
    )
    parser.add_argument("--database-url", help="the service's database, as the role that owns its tables")
    parser.add_argument(
        "--own", action="append", type=_own_folder, default=[], metavar="NAMESPACE=FOLDER",
        help="a folder of NNNN_description.sql files of your own, applied after the runtime's (repeatable)",
    )  # fmt: skip
    parser.add_argument("--relay-role", help="grant this role what the relay needs on the outbox, and nothing else")
    parser.add_argument(
        "--service-role",
        help="grant this role (the consumer's, which should own nothing) reads and writes on the tables, "
        "now and later, and the markers' day partitions through the owner's functions; it may create nothing",
    )
    args = parser.parse_args(argv)
    try:
        with psycopg.connect(_database_url(args.database_url), autocommit=True, connect_timeout=10) as connection:
            applied = schema.migrate(connection, args.own)
            for name in applied:
                print(f"applied {name}")
            print(f"{len(applied)} migration(s) applied; the schema is up to date")
            if args.relay_role:
                schema.grant_relay(connection, args.relay_role)
                print(f"granted SELECT, UPDATE, DELETE on outbox to {args.relay_role}")
            if args.service_role:
                schema.grant_service(connection, args.service_role)
                print(f"granted {args.service_role} reads and writes on every table, and the markers' day functions")
    except (schema.MigrationError, psycopg.Error) as error:
        raise SystemExit(f"effectively-once-migrate: {str(error).strip()}") from error


def purge_main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="effectively-once-purge",
        description="Delete markers older than the dedup horizon and outbox rows published longer ago than "
        "the outbox retention, in small transactions that skip locked rows (safe while consumers run).",
    )
    parser.add_argument("--database-url")
    parser.add_argument(
        "--horizon-days", type=_positive, default=30.0,
        help="markers older than this go; it must be the horizon your consumers run with (DEDUP_HORIZON_DAYS)",
    )  # fmt: skip
    parser.add_argument(
        "--consumer", action="append", default=[],
        help="purge this consumer's markers and record how far (repeatable; default: every consumer, unrecorded)",
    )  # fmt: skip
    parser.add_argument("--outbox-hours", type=_positive, default=24.0, help="published outbox rows older than this go")
    parser.add_argument("--no-outbox", action="store_true", help="leave the outbox alone")
    _kafka_arguments(parser)
    args = parser.parse_args(argv)
    horizon = timedelta(days=args.horizon_days)
    if args.topic:
        if len(args.consumer) != 1:
            parser.error("--topic weighs one consumer's horizon: give exactly one --consumer with it")
        judged = _weigh(args, args.consumer[0], horizon)
        _print_verdict(args.consumer[0], judged)
        if not judged.safe:
            raise SystemExit("effectively-once-purge: refused, nothing purged: the retention is not safe")
    else:
        print("not weighed against what could still be delivered again (give --topic to weigh it first)")
    try:
        with psycopg.connect(_database_url(args.database_url), autocommit=True, connect_timeout=10) as connection:
            for consumer in args.consumer or [None]:
                purged = purge_markers(connection, horizon, consumer_name=consumer)
                print(f"purged {purged} marker(s) older than {horizon} ({consumer or 'every consumer'})")
            if not args.no_outbox:
                purged = purge_published(connection, timedelta(hours=args.outbox_hours))
                print(f"purged {purged} outbox row(s) published more than {args.outbox_hours} h ago")
    except psycopg.Error as error:
        raise SystemExit(f"effectively-once-purge: {str(error).strip()}") from error
