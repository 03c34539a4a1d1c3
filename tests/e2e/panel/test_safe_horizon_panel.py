"""The chaos page's safe-horizon section on the panel's system: every consumer's shortest safe
marker retention with the window that sets it, a dead letter counted as soon as there is one, and
the marker-age chart beside the other live charts."""

from __future__ import annotations

import re

from tests.e2e.panel.conftest import PanelSystem
from tests.support.waiting import wait_for

CONSUMERS = (
    "orders-saga-v1",
    "inventory-reservation-v1",
    "payment-authorization-v1",
    "notification-dispatch-v1",
    "sales-projection-v1",
)


def _row(fragment: str, consumer: str) -> str:
    match = re.search(rf'<tr id="horizon-{consumer}">(.*?)</tr>', fragment, re.S)
    assert match, f"no row for {consumer}"
    return match.group(1)


def test_each_consumer_shows_its_shortest_safe_retention_and_the_window_that_sets_it(clean: PanelSystem) -> None:
    fragment = ""

    def shown() -> bool:
        nonlocal fragment
        fragment = clean.panel.get("/fragments/horizons").text
        return all(f'id="horizon-{consumer}"' in fragment for consumer in CONSUMERS)

    wait_for(shown, 30, "every consumer's safe horizon")
    for consumer in CONSUMERS:
        row = _row(fragment, consumer)
        assert "30.0 d" in row and "7.0 d" in row and "topic retention" in row, row  # kept 30 d; topics keep 7 d
        assert "runs" in row, row
    assert "payment provider keys" in _row(fragment, "payment-authorization-v1")
    assert 'id="safe-horizon"' in clean.panel.get("/chaos").text


def test_a_dead_letter_becomes_one_of_its_consumers_windows(clean: PanelSystem) -> None:
    key = clean.act("poison", kind="unknown_type", topic="payment.events")["key"]
    wait_for(lambda: any(d["key"] == key for d in clean.audit()["dead_letters"]), 30, "the poison to be dead-lettered")
    wait_for(
        lambda: "oldest dead letter" in _row(clean.panel.get("/fragments/horizons").text, "sales-projection-v1"),
        30,
        "the sales projection's dead letter among its windows",
    )


def test_the_marker_age_chart_is_among_the_live_charts(clean: PanelSystem) -> None:
    assert "Marker age and what could come back" in clean.panel.get("/fragments/charts").text
