from __future__ import annotations

import re

from infra.launcher.provisioning import migrations_for
from services.topology import CONSUMERS, DATABASES, EVENT_TOPICS, TOPIC_PARTITIONS, all_topics


def test_topics_have_enough_partitions_to_scale_a_group_out() -> None:
    assert TOPIC_PARTITIONS >= 3


def test_every_consumer_has_its_own_dead_letter_topic_among_the_topics_created() -> None:
    dead_letters = [consumer.dead_letter_topic for consumer in CONSUMERS]
    assert len(set(dead_letters)) == len(CONSUMERS)
    assert set(dead_letters) <= set(all_topics())


def test_consumer_names_are_stable_versioned_and_unique() -> None:
    names = [consumer.name for consumer in CONSUMERS]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"[a-z]+(-[a-z]+)*-v\d+", name) for name in names)


def test_every_consumer_reads_known_topics_from_a_database_with_the_runtime() -> None:
    runtime_databases = {db.name for db in DATABASES if db.runs_consumer_runtime}
    for consumer in CONSUMERS:
        assert set(consumer.topics) <= set(EVENT_TOPICS)
        assert consumer.database in runtime_databases


def test_migrations_are_numbered_without_gaps_or_repeats() -> None:
    for database in DATABASES:
        by_namespace: dict[str, list[int]] = {}
        for migration in migrations_for(database):
            by_namespace.setdefault(migration.namespace, []).append(migration.version)
        for versions in by_namespace.values():
            assert versions == list(range(1, len(versions) + 1))
        assert ("runtime" in by_namespace) == database.runs_consumer_runtime
