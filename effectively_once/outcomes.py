"""What became of one delivery to one consumer."""

from enum import StrEnum


class Outcome(StrEnum):
    APPLIED = "applied"
    """The marker was claimed and the business change committed with it."""
    DUPLICATE = "duplicate"
    """The marker already existed: this consumer had committed this message before."""
    DUPLICATE_WITH_DIFFERENT_CONTENT = "duplicate_with_different_content"
    """A duplicate (the marker existed, nothing was applied) whose content differs from the copy
    applied under the same id: a producer's bug, counted apart, its differing fields logged."""
    RETRYABLE_FAILURE = "retryable_failure"
    """The attempt rolled back and will be tried again; nothing was acknowledged."""
    TERMINAL_FAILURE = "terminal_failure"
    """No retry can help: the message went to the dead-letter topic with its reason."""
    IGNORED = "ignored"
    """A type this consumer knowingly does not handle, on a topic it reads: acknowledged, no transaction."""


class Strategy(StrEnum):
    """How a consumer deduplicates. Only `correct` is safe; the others are teaching mistakes."""

    CORRECT = "correct"
    CHECK_THEN_ACT = "check_then_act"
    MARKER_BEFORE_IN_SEPARATE_TXN = "marker_before_in_separate_txn"
    MARKER_AFTER_IN_SEPARATE_TXN = "marker_after_in_separate_txn"
    ACK_BEFORE_COMMIT = "ack_before_commit"
    MEMORY_DEDUP_ONLY = "memory_dedup_only"
    MESSAGE_ID_ONLY_KEY = "message_id_only_key"
    OCCURRED_AT_IN_KEY = "occurred_at_in_key"
    NO_DEDUP = "no_dedup"
