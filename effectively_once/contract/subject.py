"""What a team tells the contract suite about its consumer."""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from .. import schema
from ..consumer.transaction import Connection, Handler
from ..envelope import Envelope


class Tables:
    """What every subject shares: its database, its tables and how it tells an effect."""

    database_url: str
    effects: Callable[[Connection, Envelope], int]
    own_migrations: Sequence[tuple[str, Path]]
    consumer_prefix: str

    def consumer_name(self, scenario: str) -> str:
        """A consumer name no earlier run used, so markers never carry over between runs."""
        return f"{self.consumer_prefix}-{scenario}-{uuid.uuid4().hex[:8]}-v1"

    def key(self) -> str:
        return f"contract-{uuid.uuid4().hex[:12]}"

    def connect(self, **options: Any) -> Connection:
        return psycopg.connect(self.database_url, connect_timeout=10, **options)

    def migrate(self) -> None:
        with self.connect(autocommit=True) as connection:
            schema.migrate(connection, self.own_migrations)

    def effects_of(self, event: Envelope) -> int:
        with self.connect() as connection:
            return self.effects(connection, event)

    def announcements_of(self, key: str) -> int:
        """The events the consumer's service has written to its outbox about `key` (its aggregate)."""
        with self.connect() as connection:
            row = connection.execute("SELECT count(*) FROM outbox WHERE aggregate_key = %s", (key,)).fetchone()
        return int(row[0]) if row else 0

    def markers_of(self, consumer_name: str, event: Envelope) -> int:
        with self.connect() as connection:
            row = connection.execute(
                "SELECT count(*) FROM processed_message WHERE consumer_name = %s AND message_id = %s",
                (consumer_name, event.message_id),
            ).fetchone()
        return int(row[0]) if row else 0


@dataclass(frozen=True)
class Subject(Tables):
    """A team's consumer, as the contract suite drives it."""

    database_url: str
    """A database the suite may write to, as the role the consumer runs as."""
    bootstrap_servers: str
    """The Kafka cluster (the crash and poison scenarios create topics of their own)."""
    handlers: str
    """`module:attribute` naming the handlers mapping (event type -> handler): a crashed consumer
    process must import it too."""
    make_event: Callable[[str], Envelope]
    """A new event for the given key (an aggregate id of its own), one the handlers apply."""
    effects: Callable[[Connection, Envelope], int]
    """How many times this event's effect is in the team's tables (1 once applied)."""
    same_fact: Callable[[Envelope], Envelope] | None = None
    """The same business fact under a new message id (a producer's retry before its outbox): the
    handler's business key must stop it. None: the semantic-duplicate scenario is not declared."""
    in_order: Callable[[str], Sequence[Envelope]] | None = None
    """Events of one key in the order they were written; with `state`, the out-of-order scenario
    checks that any other order of delivery ends in the same state."""
    state: Callable[[Connection, str], Any] | None = None
    """The key's business state, comparable between two keys (leave the key out of it)."""
    own_migrations: Sequence[tuple[str, Path]] = field(default_factory=tuple)
    """The team's own (namespace, folder) migrations, applied after the runtime's before a run."""
    consumer_prefix: str = "contract"

    def load_handlers(self) -> Mapping[str, Handler]:
        module, _, attribute = self.handlers.partition(":")
        if not module or not attribute:
            raise ValueError(f"handlers must be 'module:attribute', not {self.handlers!r}")
        handlers: Mapping[str, Handler] = getattr(importlib.import_module(module), attribute)
        return handlers
