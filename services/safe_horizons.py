"""The demo consumers' safe horizons: what could still reach each one again (its topics' retention,
its oldest unacknowledged message, its oldest dead letter, and for the payment consumer the
provider's key lifetime), weighed against the marker retention it runs with.

`make horizon` prints them (exit 1 when one is unsafe); the chaos panel shows them beside its
dedup-horizon control. Both read Kafka as the operator.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta

from effectively_once.consumer.wiring import ConsumerSettings
from effectively_once.redelivery_windows import read_windows
from effectively_once.safe_horizon import HorizonUnknown, Verdict, Window, describe, duration, verdict
from services.operator import act_as_operator
from services.saga_contract import PROVIDER_KEY_LIFETIME
from services.settings import Settings
from services.topology import CONSUMERS, Consumer

PROVIDER_KEYS = Window("payment provider keys", PROVIDER_KEY_LIFETIME.total_seconds(), "a retried charge's key")
EXTRA_WINDOWS: Mapping[str, tuple[Window, ...]] = {"payment-authorization-v1": (PROVIDER_KEYS,)}
"""Windows Kafka cannot show, per consumer: the payment consumer passes these to its runtime too."""
DEFAULT_RETENTION = timedelta(days=ConsumerSettings.model_fields["DEDUP_HORIZON_DAYS"].default)


@dataclass(frozen=True)
class ConsumerHorizon:
    consumer: str
    verdict: Verdict | None
    error: str = ""

    @property
    def safe(self) -> bool:
        return self.verdict is not None and self.verdict.safe


def weigh(bootstrap_servers: str, consumer: Consumer, retention: timedelta) -> ConsumerHorizon:
    try:
        seen = read_windows(bootstrap_servers, consumer.name, consumer.topics, consumer.dead_letter_topic, timeout=5)
    except HorizonUnknown as error:
        return ConsumerHorizon(consumer.name, None, f"could not read what could be delivered again: {error}")
    return ConsumerHorizon(consumer.name, verdict(retention, [*seen, *EXTRA_WINDOWS.get(consumer.name, ())]))


def weigh_all(bootstrap_servers: str, retentions: Mapping[str, timedelta] | None = None) -> list[ConsumerHorizon]:
    """Every consumer's, read side by side; `retentions` by consumer name, else the default."""
    retentions = retentions or {}
    with ThreadPoolExecutor(len(CONSUMERS)) as pool:
        return list(
            pool.map(
                lambda consumer: weigh(bootstrap_servers, consumer, retentions.get(consumer.name, DEFAULT_RETENTION)),
                CONSUMERS,
            )
        )


def report(horizons: list[ConsumerHorizon]) -> list[str]:
    lines = []
    for horizon in horizons:
        lines.append(f"{horizon.consumer}:")
        if horizon.verdict is None:
            lines.append(f"  UNKNOWN: {horizon.error}; the purge waits")
            continue
        lines += [f"  {line}" for line in describe(horizon.verdict)]
    return lines


def main() -> int:
    settings = Settings()
    act_as_operator(settings)
    print(f"safe marker retention of each consumer (configured: {duration(DEFAULT_RETENTION.total_seconds())})")
    horizons = weigh_all(settings.kafka_bootstrap_servers)
    print("\n".join(report(horizons)))
    unsafe = [horizon.consumer for horizon in horizons if not horizon.safe]
    print("every retention is safe" if not unsafe else f"not safe, the purge refuses: {', '.join(unsafe)}")
    return 1 if unsafe else 0


if __name__ == "__main__":
    sys.exit(main())
