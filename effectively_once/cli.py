"""The runtime's console commands: `effectively-once-migrate` and `effectively-once-purge`
(`effectively-once-relay` is relay/run.py). Each reads DATABASE_URL when no URL is given, says
what it did line by line, and exits 2 with the reason on bad input or an unreachable database.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import psycopg

from . import schema
from .relay.claim import purge_published
from .retention import purge_markers


def _database_url(given: str | None) -> str:
    url = given or os.environ.get("DATABASE_URL", "")
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
    args = parser.parse_args(argv)
    horizon = timedelta(days=args.horizon_days)
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
