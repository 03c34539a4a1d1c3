"""The idempotent consumer: one message's path in three files, top to bottom.

- `loop.py`: poll Kafka, decode, hand a transaction's messages to the processor, dead-letter
  what failed for good, and only then store the offset;
- `processor.py`: may this message be applied (type, payload, horizon), retry it, record its
  outcome; batches and their fallback;
- `transaction.py`: claim the marker, run the handler, commit, in one transaction.

`wiring.py` builds a consumer process from its settings (`run`); `recording.py` counts, tells and
logs each outcome; `lanes.py` (CONSUMER_WORKERS), `duplicates_ahead.py` and `stall_watch.py` serve
the loop. Teaching strategies and lab
controls are not here: a workshop process plugs them in (effectively_once.lab).
"""
