"""The statement log's reading (benchmarks/order_counts.py): statements and transactions per
process, from the lines PostgreSQL writes with the window's prefix."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.order_counts import Statements, _read_from, count_statements


def test_a_transaction_counts_once_and_each_of_its_statements_once() -> None:
    lines = [
        "eo|101|inventory| LOG:  statement: BEGIN",
        "eo|101|inventory| LOG:  execute <unnamed>: INSERT INTO processed_message (consumer_name, message_id)",
        "\tVALUES ($1, $2) ON CONFLICT DO NOTHING",  # the statement's second line
        "eo|101|inventory| DETAIL:  parameters: $1 = 'inventory-reservation-v1', $2 = '7'",
        "eo|101|inventory| LOG:  execute _pg3_0: UPDATE stock SET reserved = reserved + $1",
        "eo|101|inventory| LOG:  statement: COMMIT",
        "eo|202|outbox-relay| LOG:  execute <unnamed>: SELECT id FROM outbox WHERE published_at IS NULL",
        "eo|202|outbox-relay| LOG:  statement: BEGIN",
        "eo|202|outbox-relay| LOG:  statement: ROLLBACK",
        "2026-12-07 05:00:00 UTC LOG:  checkpoint starting: time",  # before the window's prefix
        "eo|303|| LOG:  statement: SELECT 1",
    ]
    assert count_statements(lines) == {
        "inventory": Statements(statements=4, transactions=1),
        "outbox-relay": Statements(statements=3, transactions=2),
        "(unnamed)": Statements(statements=1, transactions=1),
    }


def test_two_backends_of_one_process_keep_their_own_transactions() -> None:
    lines = [
        "eo|1|payment| LOG:  statement: BEGIN",
        "eo|2|payment| LOG:  execute <unnamed>: SELECT 1",  # the other backend: a transaction of its own
        "eo|1|payment| LOG:  execute <unnamed>: SELECT 2",
        "eo|1|payment| LOG:  statement: COMMIT",
    ]
    assert count_statements(lines) == {"payment": Statements(statements=4, transactions=2)}


@given(st.lists(st.lists(st.sampled_from(["SELECT 1", "UPDATE t SET n = n + 1"]), max_size=4), max_size=20))
def test_explicit_transactions_count_one_each_whatever_they_hold(transactions: list[list[str]]) -> None:
    lines = []
    for body in transactions:
        lines.append("eo|9|orders-saga| LOG:  statement: BEGIN")
        lines += [f"eo|9|orders-saga| LOG:  execute <unnamed>: {sql}" for sql in body]
        lines.append("eo|9|orders-saga| LOG:  statement: COMMIT")
    counted = count_statements(lines).get("orders-saga", Statements())
    assert counted.transactions == len(transactions)
    assert counted.statements == sum(len(body) + 2 for body in transactions)


def test_the_log_is_read_across_one_rotation(tmp_path: Path) -> None:
    log = tmp_path / "postgres.log"
    log.write_text("before\nfirst\n")
    start, inode = len("before\n"), log.stat().st_ino
    log.rename(tmp_path / "postgres.log.1")  # the supervisor moves a full log aside...
    with (tmp_path / "postgres.log.1").open("a") as rotated:
        rotated.write("second\n")
    log.write_text("third, a line longer than where the window began\n")  # ...and starts a new one
    assert _read_from(log, start, inode) == ["first", "second", "third, a line longer than where the window began"]


def test_a_log_not_rotated_is_read_from_where_the_window_began(tmp_path: Path) -> None:
    log = tmp_path / "postgres.log"
    log.write_text("before\nfirst\n")
    start, inode = len("before\n"), log.stat().st_ino
    with log.open("a") as file:
        file.write("second\n")
    assert _read_from(log, start, inode) == ["first", "second"]


def test_a_log_rotated_twice_is_read_from_its_second_backup(tmp_path: Path) -> None:
    log = tmp_path / "postgres.log"
    log.write_text("before\nfirst\n")
    start, inode = len("before\n"), log.stat().st_ino
    log.rename(tmp_path / "postgres.log.2")
    (tmp_path / "postgres.log.1").write_text("second\n")
    log.write_text("third\n")
    assert _read_from(log, start, inode) == ["first", "second", "third"]


def test_a_log_rotated_past_its_backups_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "postgres.log"
    log.write_text("before\n")
    start, inode = log.stat().st_size, log.stat().st_ino
    log.rename(tmp_path / "dropped")  # gone from the chain, as the oldest backup the supervisor deletes
    (tmp_path / "postgres.log.1").write_text("x\n")
    log.write_text("y\n")
    with pytest.raises(RuntimeError, match="rotated more often than its backups keep"):
        _read_from(log, start, inode)
