"""How the demo runs each of its consumers: the runtime's `run`, given the teaching paths and the
lab controls, because the chaos panel and the workshop's labs switch and rewind them. A team's
production consumer calls `effectively_once.consumer.wiring.run` without either."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from effectively_once import lab
from effectively_once.consumer import wiring
from effectively_once.consumer.processor import Handler
from effectively_once.safe_horizon import Window
from services.topology import consumer


def run(
    consumer_name: str,
    handlers: Mapping[str, Handler],
    ignored_types: Iterable[str] = (),
    windows: Sequence[Window] = (),
) -> None:
    """Run the demo consumer `consumer_name` on the topics the topology gives it; `windows` are
    its redelivery windows beyond Kafka's (the payment provider's key lifetime)."""
    wiring.run(
        consumer_name,
        consumer(consumer_name).topics,
        handlers,
        ignored_types=ignored_types,
        paths=lab.PATHS,
        attach=lab.attach,
        windows=windows,
    )
