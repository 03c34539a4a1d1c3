"""Message ids that carry the time they were minted: UUIDv7 (RFC 9562).

A marker lives in the day partition of the time its message id carries (migration 0008), so that
retention drops whole days while the marker's key stays (consumer, message id): the partition is a
function of the id, never of another field a copy could change. `message_id_time` reads that time
exactly as the database's `message_id_time()` does: only the canonical lower-case text of a
version-7 UUID carries one. Any other id is *untimed* (a foreign producer's): it is deduplicated
all the same, its marker kept in a partition of its own and purged by when it was processed.
"""

from __future__ import annotations

import re
import secrets
import time
import uuid
from datetime import UTC, datetime, timedelta

_TIMED = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime.max.replace(tzinfo=UTC)


def new_message_id(now_ns: int | None = None) -> str:
    """A new UUIDv7: 48 bits of Unix milliseconds, the version, 74 random bits and the variant."""
    milliseconds = (time.time_ns() if now_ns is None else now_ns) // 1_000_000
    random_bits = secrets.randbits(74)
    value = (
        (milliseconds & (2**48 - 1)) << 80
        | 0x7 << 76
        | (random_bits >> 62) << 64  # rand_a: 12 bits
        | 0b10 << 62
        | random_bits & (2**62 - 1)  # rand_b: 62 bits
    )
    return str(uuid.UUID(int=value))


def message_id_time(message_id: str) -> datetime | None:
    """The time a UUIDv7 message id carries (millisecond precision), or None for an untimed id. An
    id past the year 9999, which Python's datetime cannot hold, carries `LATEST`."""
    if not _TIMED.fullmatch(message_id):
        return None
    milliseconds = int(message_id[:8] + message_id[9:13], 16)
    try:
        return _EPOCH + timedelta(milliseconds=milliseconds)
    except OverflowError:
        return LATEST
