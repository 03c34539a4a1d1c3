"""What a team tells the black-box contract suite about a consumer process, in any language."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..consumer.transaction import Connection
from ..envelope import Envelope
from .subject import Tables


@dataclass(frozen=True)
class ProcessSubject(Tables):
    """A consumer process, as the black-box suite drives it: only through Kafka, its database and
    its control endpoint (docs/consumer-process-contract.md), never by importing its code."""

    database_url: str
    """A `postgresql://` URL of a database the suite may write to, holding the runtime's tables
    and the consumer's own (its query may set `options=-c search_path=...`)."""
    bootstrap_servers: str
    command: Sequence[str]
    """The argv that starts one consumer process, configured by the contract's environment."""
    make_event: Callable[[str], Envelope]
    """A new event for the given key (an aggregate id of its own), one the consumer applies."""
    effects: Callable[[Connection, Envelope], int]
    """How many times this event's effect is in the consumer's tables (1 once applied)."""
    cwd: Path | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    """Variables of its own the process needs (JAVA_TOOL_OPTIONS, NODE_OPTIONS...)."""
    same_fact: Callable[[Envelope], Envelope] | None = None
    """The same business fact under a new message id; None: the semantic-duplicate scenario is
    not declared."""
    in_order: Callable[[str], Sequence[Envelope]] | None = None
    state: Callable[[Connection, str], Any] | None = None
    own_migrations: Sequence[tuple[str, Path]] = field(default_factory=tuple)
    consumer_prefix: str = "black-box"
    start_timeout: float = 120
    """How long a process may take to answer on its control endpoint (a JVM's start included)."""
