"""Duplicates found ahead: in a run of redeliveries, one read finds a poll's committed markers.

After a group rewind, a rebalance or a crash between commit and acknowledgement, the group
redelivers runs of messages that were applied already. Found one by one, each costs a
transaction of its own. When the previous poll held a duplicate, the loop asks once which of the
next poll's messages have committed markers (one round trip, nothing written, no fsync), and
those are duplicates without a transaction.

Safe by construction: a committed marker was committed together with the effect, so the message
was applied. A message not found here takes the correct path as always, and its claim decides: a
copy in flight elsewhere, or a marker committed since this read, still ends as a duplicate there.
The same read compares each found copy's content with the marker's digest (migration 0008).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from ..envelope import Envelope
from .transaction import contents

FIND = """
SELECT m.message_id,
       coalesce(message_content_differences(m.content_digest, message_content_digest(c.body::jsonb, c.delivery::jsonb)),
                '{}')
  FROM unnest(%s::text[], %s::text[], %s::text[]) AS c (id, body, delivery)
  JOIN processed_message m ON m.consumer_name = %s AND m.message_id = c.id AND m.id_time = message_id_time(c.id)
"""


def committed_markers(
    connection: psycopg.Connection[Any], consumer_name: str, events: Sequence[Envelope]
) -> dict[str, list[str]]:
    """The ids among `events` whose markers `consumer_name` has committed, each with the fields in
    which the copy differs from what was applied (empty: a plain redelivery), in one round trip:
    the read and the end of its transaction go together in a pipeline."""
    ids, bodies, deliveries = contents(events)
    with connection.pipeline():
        cursor = connection.execute(FIND, (ids, bodies, deliveries, consumer_name))
        connection.commit()
    return {message_id: list(fields) for message_id, fields in cursor.fetchall()}
