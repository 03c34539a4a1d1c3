"""effectively-once: an idempotent-consumer runtime for Kafka and PostgreSQL.

It owns the pieces a service must not get wrong: the `processed_message` marker claimed in the
same PostgreSQL transaction as the business change (consumer/transaction.py), offsets
acknowledged only after commit (consumer/loop.py), retries, dead letters, marker retention and the dedup horizon,
the transactional outbox and its relay, the pending-work worker for remote calls, metrics and
fault points. A service supplies handlers; docs/adopting-the-runtime.md shows how.
"""

__version__ = "0.2.0"
