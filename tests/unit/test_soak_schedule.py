"""The soak's chaos schedule covers every point of every process and every other kind of fault."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from soak.schedule import (
    BROKER_RESTART,
    CLUSTER_FAULTS,
    CONNECT_KILL,
    DATABASE_FAILOVER,
    DATABASE_RESTART,
    KINDS,
    LEADER_KILL,
    LOCK_EXPIRY,
    PROCESS_CRASH,
    REWIND,
    plan,
)

POINTS = {
    "inventory": ["before_claim", "after_claim", "before_commit", "after_commit_before_ack", "after_check"],
    "inventory-2": ["before_claim", "after_commit_before_ack"],
    "outbox-relay": ["relay.before_publish", "relay.after_publish_before_mark"],
}


def test_every_point_of_every_process_is_crashed_once_and_every_kind_comes_early() -> None:
    steps = plan(POINTS, ["inventory", "inventory-2"], infrastructure_restarts=True)
    crashes = {(s.target, s.point) for s in steps if s.kind == PROCESS_CRASH}
    assert crashes == {(p, point) for p, names in POINTS.items() for point in names if point != "after_check"}
    assert {s.target for s in steps if s.kind == REWIND} == {"inventory", "inventory-2"}
    assert {s.kind for s in steps} == set(KINDS) - set(CLUSTER_FAULTS) - {CONNECT_KILL, DATABASE_FAILOVER, LOCK_EXPIRY}
    first_half = {s.kind for s in steps[: len(steps) // 2 + 1]}
    assert {PROCESS_CRASH, REWIND} <= first_half


def test_where_debezium_relays_its_worker_is_killed_early_and_again_later() -> None:
    steps = plan(POINTS, ["inventory"], infrastructure_restarts=True, connect_kills=2)
    kills = [n for n, step in enumerate(steps) if step.kind == CONNECT_KILL]
    assert len(kills) == 2
    assert kills[0] < len(steps) // 2, "the first comes in the first half of the soak"
    assert kills[1] > kills[0] + 1, "the second is not right after the first"
    assert CONNECT_KILL not in {s.kind for s in plan(POINTS, ["inventory"], infrastructure_restarts=True)}


def test_a_share_group_has_a_lock_that_expires_in_place_of_its_rewind() -> None:
    steps = plan(POINTS, ["inventory", "inventory-2"], infrastructure_restarts=True, share_consumers={"inventory-2"})
    assert [s.target for s in steps if s.kind == REWIND] == ["inventory"]
    assert [s.target for s in steps if s.kind == LOCK_EXPIRY] == ["inventory-2"]
    assert {(s.target, s.point) for s in steps if s.kind == PROCESS_CRASH} >= {("inventory-2", "before_claim")}


def test_without_its_own_infrastructure_the_soak_restarts_neither_broker_nor_database() -> None:
    kinds = {s.kind for s in plan(POINTS, ["inventory"], infrastructure_restarts=False)}
    assert BROKER_RESTART not in kinds and DATABASE_RESTART not in kinds


def test_a_replicated_cluster_loses_leaders_a_frozen_node_and_its_controller_instead_of_restarting() -> None:
    steps = plan(POINTS, ["inventory", "inventory-2"], infrastructure_restarts=True, brokers=3, leader_kills=5)
    kinds = [s.kind for s in steps]
    assert set(kinds) == set(KINDS) - {BROKER_RESTART, CONNECT_KILL, DATABASE_FAILOVER, LOCK_EXPIRY}
    assert kinds.count(LEADER_KILL) == 5
    killed = [s.target for s in steps if s.kind == LEADER_KILL]
    assert {target.split("/")[0] for target in killed} == {"orders.events", "inventory.events", "payment.events"}
    assert all(target.rsplit("/", 1)[1].isdigit() for target in killed)
    assert LEADER_KILL in kinds[: len(kinds) // 2 + 1]


def test_a_postgresql_pair_fails_over_in_place_of_the_database_restart_spread_through_the_soak() -> None:
    steps = plan(POINTS, ["inventory", "inventory-2"], infrastructure_restarts=True, brokers=3, failovers=2)
    kinds = [s.kind for s in steps]
    assert DATABASE_RESTART not in kinds and kinds.count(DATABASE_FAILOVER) == 2
    first, second = (n for n, kind in enumerate(kinds) if kind == DATABASE_FAILOVER)
    assert second > first + 1, "the second failover is not right after the first"
    assert DATABASE_FAILOVER not in {
        s.kind for s in plan(POINTS, ["inventory"], infrastructure_restarts=False, failovers=2)
    }


@given(seed=st.integers(0, 2**32), crashes=st.integers(0, 60))
def test_the_same_seed_gives_the_same_plan_and_every_pass_covers_every_point(seed: int, crashes: int) -> None:
    first = plan(POINTS, ["inventory"], infrastructure_restarts=True, brokers=3, crashes=crashes, seed=seed)
    again = plan(POINTS, ["inventory"], infrastructure_restarts=True, brokers=3, crashes=crashes, seed=seed)
    assert first == again
    crash_steps = [(s.target, s.point) for s in first if s.kind == PROCESS_CRASH]
    every_point = {(p, point) for p, names in POINTS.items() for point in names if point != "after_check"}
    assert len(crash_steps) >= max(crashes, len(every_point))
    for start in range(0, len(crash_steps), len(every_point)):
        assert set(crash_steps[start : start + len(every_point)]) == every_point


def test_different_seeds_visit_the_points_in_different_orders() -> None:
    orders = {
        tuple((s.target, s.point) for s in plan(POINTS, [], infrastructure_restarts=False, seed=seed))
        for seed in range(20)
    }
    assert len(orders) > 1
