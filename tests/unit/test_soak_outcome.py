"""What a test shows of a soak that failed: its verdict first, each waiting line once."""

from __future__ import annotations

from tests.support.launcher_run import _soak_outcome

PRINTED = """soak: 45 s at 6 orders/s on 1 Kafka node(s); 36 chaos steps
    13.3 s  connect kill
soak: load stopped; waiting for every saga to finish
soak: 177 orders in flight, 180 outbox rows unpublished; connector outbox-inventory FAILED: gone
soak: 177 orders in flight, 180 outbox rows unpublished; connector outbox-inventory FAILED: gone
soak: 177 orders in flight, 180 outbox rows unpublished; connector outbox-inventory FAILED: gone
soak finished in 348 s
  not carried out          none
  anomalies                633 (must be 0)
  orders not terminal      177 (must be 0)
SOAK: FAILED"""


def test_the_first_line_says_why_the_soak_failed() -> None:
    first, _, rest = _soak_outcome(PRINTED).partition("\n")
    assert "anomalies 633 (must be 0)" in first and "orders not terminal 177" in first
    assert "connector outbox-inventory FAILED: gone" in first and first.endswith("SOAK: FAILED")
    assert rest.count("180 outbox rows unpublished") == 1 and rest.endswith("SOAK: FAILED")


def test_a_soak_that_printed_nothing_says_so() -> None:
    assert _soak_outcome("").startswith("the soak printed no verdict")
