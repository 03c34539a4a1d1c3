"""How the demo runs each of its consumers: the runtime's `run`, given the teaching paths and the
lab controls, because the chaos panel and the workshop's labs switch and rewind them. A team's
production consumer calls `effectively_once.runner.run` without either."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from effectively_once import runner
from effectively_once.processor import PATHS, Handler
from effectively_once.safe_horizon import Window
from effectively_once.teaching import with_teaching_paths
from services.topology import consumer


def run(
    consumer_name: str,
    handlers: Mapping[str, Handler],
    ignored_types: Iterable[str] = (),
    windows: Sequence[Window] = (),
) -> None:
    """Run the demo consumer `consumer_name` on the topics the topology gives it; `windows` are
    its redelivery windows beyond Kafka's (the payment provider's key lifetime)."""
    runner.run(
        consumer_name,
        consumer(consumer_name).topics,
        handlers,
        ignored_types=ignored_types,
        paths=with_teaching_paths(PATHS),
        lab=True,
        windows=windows,
    )
