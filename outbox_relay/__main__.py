"""`python -m outbox_relay`: the relay process; `python -m outbox_relay connect-worker`: the
Kafka Connect worker of RELAY=debezium in a container (docker-compose's `kafka-connect`)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from pydantic import ValidationError

from services.settings import Settings

from . import debezium, wiring


def connect_worker(arguments: argparse.Namespace) -> int:
    """Render the worker and one connector per outbox database from the templates the native path
    uses, then become the worker."""
    settings = Settings()
    worker, connectors = debezium.render(
        settings, Path(arguments.config_dir), offsets=Path(arguments.offsets), rest_host=arguments.rest_host
    )
    java = f"{settings.JAVA_HOME}/bin/java" if settings.JAVA_HOME else shutil.which("java")
    if not java:
        print("outbox_relay: Java was not found: install Java 17+ or set JAVA_HOME", file=sys.stderr)
        return 2
    command = debezium.java_command(java, Path(arguments.jars), settings.KAFKA_CONNECT_HEAP, worker, connectors)
    os.execv(command[0], command)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m outbox_relay", description=__doc__)
    commands = parser.add_subparsers(dest="command")
    worker = commands.add_parser("connect-worker", help="RELAY=debezium's Kafka Connect worker, in a container")
    worker.add_argument("--jars", required=True, help="Kafka Connect's and Debezium's jars")
    worker.add_argument("--config-dir", required=True, help="where to render the worker and its connectors")
    worker.add_argument("--offsets", required=True, help="the offsets file (a volume, to survive a restart)")
    worker.add_argument("--rest-host", default="127.0.0.1", help="where its REST API listens (compose: 0.0.0.0)")
    arguments = parser.parse_args(argv)
    try:
        if arguments.command == "connect-worker":
            return connect_worker(arguments)
        wiring.run()
    except ValidationError as error:
        print(f"outbox_relay: the configuration is not valid:\n{error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
