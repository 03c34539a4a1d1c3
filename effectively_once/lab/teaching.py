"""The teaching strategies: each a plug-in path that gets one thing wrong on purpose.

A processor runs the one path it is given (`MessageProcessor(path=...)`, the correct one by
default); a process may choose among the paths it was given (`wiring.run(paths=...)`): these only
where it passes them (the demo's consumers and the labs do, as `effectively_once.lab.PATHS`). A
setting alone cannot switch a production consumer to one. Each docstring says what goes wrong, and the
workshop's labs (docs/workshop/) make it happen.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ..consumer.processor import Path
from ..consumer.transaction import CLAIM, Attempt, CorrectPath, Handler, call_handler, claim_row, transaction
from ..envelope import Envelope
from ..outcomes import Outcome, Strategy

CHECK = "SELECT 1 FROM processed_message WHERE consumer_name = %s AND message_id = %s"
MESSAGE_ID_ONLY_CONSUMER = "(message-id-only)"
"""The marker name the `message_id_only_key` mistake uses for every consumer alike."""


class _OneAtATime:
    """Teaching paths take one message per transaction (or two), never a batch."""

    strategy: Strategy
    batches = False

    def attempt_batch(self, run: Attempt, events: Sequence[Envelope], handlers: Sequence[Handler]) -> list[Outcome]:
        raise NotImplementedError("teaching paths run one message at a time")


class CheckThenAct(_OneAtATime):
    """SELECT the marker, act, then insert it: two deliveries at once both pass the check."""

    strategy = Strategy.CHECK_THEN_ACT

    def attempt(self, run: Attempt, event: Envelope, handler: Handler) -> Outcome:
        with transaction(run.connection):
            if run.connection.execute(CHECK, (run.consumer_name, event.message_id)).fetchone():
                return Outcome.DUPLICATE
            run.hit("after_check")
            call_handler(handler, event, run.connection)
            run.connection.execute(CLAIM, claim_row(run.consumer_name, event))  # the conflict is ignored
            run.hit("before_commit")
        return Outcome.APPLIED


class MarkerBeforeInSeparateTransaction(_OneAtATime):
    """Commit the marker first: a crash before the effect loses the message."""

    strategy = Strategy.MARKER_BEFORE_IN_SEPARATE_TXN

    def attempt(self, run: Attempt, event: Envelope, handler: Handler) -> Outcome:
        with transaction(run.connection):
            if not run.claim(event):
                return Outcome.DUPLICATE
        run.hit("between_transactions")
        with transaction(run.connection):
            call_handler(handler, event, run.connection)
            run.hit("before_commit")
        return Outcome.APPLIED


class MarkerAfterInSeparateTransaction(_OneAtATime):
    """Commit the effect first: a crash before the marker applies it twice."""

    strategy = Strategy.MARKER_AFTER_IN_SEPARATE_TXN

    def attempt(self, run: Attempt, event: Envelope, handler: Handler) -> Outcome:
        with transaction(run.connection):
            if run.connection.execute(CHECK, (run.consumer_name, event.message_id)).fetchone():
                return Outcome.DUPLICATE
            call_handler(handler, event, run.connection)
            run.hit("before_commit")
        run.hit("between_transactions")
        with transaction(run.connection):
            run.connection.execute(CLAIM, claim_row(run.consumer_name, event))
        return Outcome.APPLIED


class AckBeforeCommit(CorrectPath):
    """The correct transaction, but the offset is committed before it begins (the lab's
    `acknowledge_first` hook does that in the loop): a crash loses the message."""

    strategy = Strategy.ACK_BEFORE_COMMIT
    batches = False


class _MarkerKeyedAmiss(_OneAtATime):
    """The correct claim, its marker owned by another name than the consumer's alone."""

    def owner(self, run: Attempt, event: Envelope) -> str:
        raise NotImplementedError

    def attempt(self, run: Attempt, event: Envelope, handler: Handler) -> Outcome:
        with transaction(run.connection):
            if not run.connection.execute(CLAIM, claim_row(self.owner(run, event), event)).fetchone():
                return Outcome.DUPLICATE
            run.hit("after_claim")
            call_handler(handler, event, run.connection)
            run.hit("before_commit")
        return Outcome.APPLIED


class MessageIdOnlyKey(_MarkerKeyedAmiss):
    """One marker per message for every consumer: the second consumer of a message skips it."""

    strategy = Strategy.MESSAGE_ID_ONLY_KEY

    def owner(self, run: Attempt, event: Envelope) -> str:
        return MESSAGE_ID_ONLY_CONSUMER


class OccurredAtInKey(_MarkerKeyedAmiss):
    """The marker's key holds a field besides the id (the time the message occurred, as a marker
    table partitioned by that time must): a copy with the same id and another occurred_at claims
    a marker of its own and is applied again."""

    strategy = Strategy.OCCURRED_AT_IN_KEY

    def owner(self, run: Attempt, event: Envelope) -> str:
        return f"{run.consumer_name}@{event.occurred_at.isoformat()}"


class MemoryDedupOnly(_OneAtATime):
    """Remember ids in memory: a restart (or a second member) forgets them."""

    strategy = Strategy.MEMORY_DEDUP_ONLY

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def attempt(self, run: Attempt, event: Envelope, handler: Handler) -> Outcome:
        if event.message_id in self.seen:
            return Outcome.DUPLICATE
        with transaction(run.connection):
            call_handler(handler, event, run.connection)
            run.hit("before_commit")
        self.seen.add(event.message_id)
        return Outcome.APPLIED


class NoDedup(_OneAtATime):
    """No marker at all: every redelivery applies again."""

    strategy = Strategy.NO_DEDUP

    def attempt(self, run: Attempt, event: Envelope, handler: Handler) -> Outcome:
        with transaction(run.connection):
            call_handler(handler, event, run.connection)
            run.hit("before_commit")
        return Outcome.APPLIED


TEACHING_PATHS: Mapping[Strategy, Callable[[], Path]] = {
    path.strategy: path
    for path in (
        CheckThenAct,
        MarkerBeforeInSeparateTransaction,
        MarkerAfterInSeparateTransaction,
        AckBeforeCommit,
        MemoryDedupOnly,
        MessageIdOnlyKey,
        OccurredAtInKey,
        NoDedup,
    )
}
"""Strategy -> a factory of its path (each processor makes its own: memory is per process)."""


def with_teaching_paths(paths: Mapping[Strategy, Callable[[], Path]]) -> dict[Strategy, Callable[[], Path]]:
    """`paths` and every teaching path: what a workshop process passes to the runtime."""
    return {**paths, **TEACHING_PATHS}
