"""Duplicates found ahead: in a run of redeliveries, one read finds a poll's committed markers.

After a group rewind, a rebalance or a crash between commit and acknowledgement, the group
redelivers runs of messages that were applied already. Found one by one, each costs a
transaction of its own. When the previous poll held a duplicate, the loop asks once which of the
next poll's messages have committed markers (one round trip, nothing written, no fsync), and
those are duplicates without a transaction.

Safe by construction: a committed marker was committed together with the effect, so the message
was applied. A message not found here takes the correct path as always, and its claim decides: a
copy in flight elsewhere, or a marker committed since this read, still ends as a duplicate there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from .envelope import Envelope

FIND = (
    "SELECT message_id FROM processed_message WHERE consumer_name = %s "
    "AND (message_id, occurred_at) IN (SELECT * FROM unnest(%s::text[], %s::timestamptz[])) "
    # the markers from before migration 0005, until retention retires their table to an empty view
    "UNION ALL SELECT message_id FROM processed_message_legacy WHERE consumer_name = %s AND message_id = ANY(%s)"
)


def committed_markers(connection: psycopg.Connection[Any], consumer_name: str, events: Sequence[Envelope]) -> set[str]:
    """The ids among `events` whose markers `consumer_name` has committed, in one round trip:
    the read and the end of its transaction go together in a pipeline."""
    ids = [event.message_id for event in events]
    occurred = [event.occurred_at for event in events]
    with connection.pipeline():
        cursor = connection.execute(FIND, (consumer_name, ids, occurred, consumer_name, ids))
        connection.commit()
    return {row[0] for row in cursor.fetchall()}
