"""The idempotent consumer runtime shared by every service.

It owns the pieces a service must not get wrong: the `processed_message` marker claimed in the
same PostgreSQL transaction as the business change, offsets acknowledged only after commit,
retries, dead letters, outcome metrics and fault points. A service supplies only handlers.
"""

from pathlib import Path

MIGRATIONS = Path(__file__).parent / "migrations"
"""SQL migrations every service database receives before its own."""
