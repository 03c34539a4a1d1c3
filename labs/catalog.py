"""Every lab, in the order a workshop takes them."""

from __future__ import annotations

from labs.lab import Lab
from labs.scenarios import (
    ack_before_commit,
    broker_loss,
    check_then_act,
    crash_after_commit,
    failover,
    lock_expiry,
    marker_after,
    marker_before,
    memory_dedup,
    message_id_only,
    out_of_order,
    poison_and_redrive,
    provider_timeout,
    relay_crash,
    retention_horizon,
    same_id_another_time,
    serialization_failures,
    stopped_connector,
)

LABS = (
    Lab(
        1,
        "crash-after-commit",
        "A crash after the commit, before the acknowledgement",
        crash_after_commit.run,
        (
            "tests/integration/test_consumer_crashes.py::test_a_crash_after_commit_before_ack_is_redelivered_by_kafka_and_counted_as_duplicate",
        ),
    ),
    Lab(
        2,
        "check-then-act",
        "The check-then-act race",
        check_then_act.run,
        (
            "tests/integration/test_teaching_strategies.py::test_two_simultaneous_deliveries_double_only_under_check_then_act",
        ),
        expect="doubled",
    ),
    Lab(
        3,
        "marker-before",
        "The marker committed alone, before the change",
        marker_before.run,
        (
            "tests/integration/test_teaching_strategies.py::test_a_failure_between_marker_and_change_loses_or_doubles_only_with_separate_transactions",
        ),
        expect="lost",
    ),
    Lab(
        4,
        "marker-after",
        "The marker committed alone, after the change",
        marker_after.run,
        (
            "tests/integration/test_teaching_strategies.py::test_a_failure_between_marker_and_change_loses_or_doubles_only_with_separate_transactions",
        ),
        expect="doubled",
    ),
    Lab(
        5,
        "ack-before-commit",
        "Acknowledging before the commit",
        ack_before_commit.run,
        (
            "tests/integration/test_consumer_crashes.py::test_a_crash_before_commit_loses_the_message_only_when_it_was_acknowledged_first",
        ),
        expect="lost",
    ),
    Lab(
        6,
        "memory-dedup",
        "In-memory deduplication after a restart",
        memory_dedup.run,
        (
            "tests/integration/test_teaching_strategies.py::test_a_redelivery_after_a_restart_doubles_only_with_in_memory_dedup",
        ),
        expect="doubled",
    ),
    Lab(
        7,
        "message-id-only",
        "The message id alone as the key",
        message_id_only.run,
        (
            "tests/integration/test_teaching_strategies.py::test_a_second_consumer_of_the_same_event_is_suppressed_only_by_a_message_id_only_key",
        ),
        expect="lost",
    ),
    Lab(
        8,
        "serialization-failures",
        "Serialization failures and the whole-transaction retry",
        serialization_failures.run,
        (
            "tests/integration/test_idempotent_claim.py::test_a_serialization_failure_is_retried_whole_under_the_same_message_id",
            "tests/integration/test_idempotent_claim.py::test_serialization_failures_past_the_bound_are_never_applied_and_go_to_dead_letter",
        ),
    ),
    Lab(
        9,
        "relay-crash",
        "The relay crashes after publishing, before marking",
        relay_crash.run,
        (
            "tests/integration/test_outbox_relay.py::test_a_crash_after_publish_before_mark_republishes_the_same_id_and_a_consumer_applies_it_once",
        ),
    ),
    Lab(
        10,
        "provider-timeout",
        "The payment provider times out after charging",
        provider_timeout.run,
        (
            "tests/integration/test_saga_services.py::test_a_provider_timeout_after_charging_is_retried_with_the_same_key_into_one_charge",
            "tests/integration/test_sandboxes.py::test_a_timeout_after_charging_then_a_retry_with_the_same_key_is_one_charge",
        ),
    ),
    Lab(
        11,
        "out-of-order",
        "Events out of order",
        out_of_order.run,
        ("tests/integration/test_idempotent_claim.py::test_out_of_order_events_never_move_the_order_state_backwards",),
    ),
    Lab(
        12,
        "retention-horizon",
        "The retention horizon and a late replay",
        retention_horizon.run,
        (
            "tests/integration/test_idempotent_claim.py::test_a_message_older_than_the_dedup_horizon_is_refused_not_applied",
            "tests/integration/test_marker_retention.py::test_a_purge_records_how_far_it_went_and_never_moves_that_back",
        ),
    ),
    Lab(
        13,
        "poison-and-redrive",
        "A poison message, and a dead letter re-driven with its original id",
        poison_and_redrive.run,
        (
            "tests/integration/test_consumer_loop.py::test_every_kind_of_poison_is_dead_lettered_with_its_reason_and_the_consumer_keeps_going",
            "tests/e2e/panel/test_controls_api.py::test_poison_is_dead_lettered_with_its_reason_by_every_consumer_of_the_topic",
        ),
    ),
    Lab(
        14,
        "broker-loss",
        "A Kafka node dies under load",
        broker_loss.run,
        (
            "tests/e2e/panel/test_broker_faults.py::test_a_frozen_then_killed_broker_comes_back_and_the_orders_around_it_end_once",
            "tests/integration/test_relay_leader_loss.py::test_a_leader_that_dies_before_its_followers_copied_the_rows",
        ),
    ),
    Lab(
        15,
        "stopped-connector",
        "Debezium's connector stops, and its slot keeps the log",
        stopped_connector.run,
        (
            "tests/e2e/test_debezium_relay_system.py::test_the_panel_shows_each_slot_and_a_paused_connector_holds_its_events_until_resumed",
            "tests/integration/test_debezium_relay.py::test_the_relay_marks_a_row_only_once_debeziums_slot_has_confirmed_its_commit",
            "tests/integration/test_alert_rules.py::test_a_slot_that_keeps_growing_fires_its_alert_and_an_idle_one_does_not",
        ),
        relay="debezium",
    ),
    Lab(
        16,
        "same-id-another-time",
        "The same id, another timestamp",
        same_id_another_time.run,
        (
            "tests/integration/test_contract_suite.py::test_the_inventory_consumer_keeps_the_runtime_contract",
            "tests/integration/test_message_identity.py::test_the_copy_property_fails_a_consumer_whose_marker_key_holds_occurred_at",
            "tests/integration/test_marker_migration.py::test_every_message_applied_before_the_migration_is_a_duplicate_after_it_whatever_its_occurred_at",
        ),
    ),
    Lab(
        17,
        "failover",
        "The primary dies: what an asynchronous standby loses",
        failover.run,
        (
            "tests/e2e/test_soak.py::test_an_asynchronous_standby_loses_acknowledged_work_and_a_rewind_applies_it_once",
            "tests/e2e/test_soak.py::test_a_short_soak_with_two_replicas_under_every_kind_of_fault_loses_nothing_and_doubles_nothing",
            "tests/e2e/test_postgres_pair.py::test_an_asynchronous_standby_left_behind_loses_commits_that_had_returned",
            "tests/e2e/test_postgres_pair.py::test_every_commit_that_returned_survives_a_failover_to_a_synchronous_standby",
        ),
        postgres="ha",
        expect="lost",
    ),
    Lab(
        18,
        "lock-expiry",
        "A share group's lock that expired",
        lock_expiry.run,
        (
            "tests/integration/test_share_groups.py::test_a_record_whose_lock_expired_under_its_first_member_is_applied_by_another",
            "tests/e2e/test_share_groups_system.py::test_the_lock_expiry_lab",
        ),
        share_groups=True,
    ),
)

BY_NAME = {lab.name: lab for lab in LABS}
