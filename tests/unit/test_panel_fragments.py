"""A polled fragment that has not changed is not swapped: the page keeps the elements a pointer
may be about to press. The panel runs in-process with its parked listing replaced by a list the
test changes."""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient

from chaos_panel.settings import PanelSettings
from chaos_panel.web.app import create_app

NOWHERE = "http://127.0.0.1:9"
ROW = {
    "order_id": "o-1",
    "process": "notification-dispatcher",
    "service": "notification",
    "parked_at": "2026-12-03T06:00:00.000000+00:00",
    "work": "order confirmation email",
    "reason": "refused by the mail service: HTTP 422",
    "idempotency_key": "k-1",
    "redrivable": True,
    "why_not": "",
}


def _client(listing: list[dict[str, Any]]) -> TestClient:
    settings = PanelSettings(
        CONTROL_URLS={}, PAYMENT_PROVIDER_URL=NOWHERE, MAIL_URL=NOWHERE, KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:9"
    )
    app = create_app(settings)
    app.state.panel.control.parked = lambda: (list(listing), [])
    return TestClient(app, base_url="http://127.0.0.1:8080")


def _seen(html: str) -> str:
    found = re.search(r'hx-get="/fragments/parked\?seen=([0-9a-f]+)"', html)
    assert found, html
    return found.group(1)


def test_the_parked_rows_are_swapped_only_when_they_change() -> None:
    listing = [ROW]
    client = _client(listing)
    page = client.get("/parked")
    assert "Re-drive" in page.text
    seen = _seen(page.text)
    unchanged = client.get("/fragments/parked", params={"seen": seen})
    assert unchanged.status_code == 204 and unchanged.text == ""

    listing.append({**ROW, "order_id": "o-2", "idempotency_key": "k-2"})
    changed = client.get("/fragments/parked", params={"seen": seen})
    assert changed.status_code == 200 and "o-2" in changed.text
    assert _seen(changed.text) != seen
    assert client.get("/fragments/parked", params={"seen": _seen(changed.text)}).status_code == 204


def test_a_poll_without_a_digest_gets_the_rows() -> None:
    answer = _client([ROW]).get("/fragments/parked")
    assert answer.status_code == 200 and "o-1" in answer.text and 'hx-swap="outerHTML"' in answer.text


def test_the_chaos_page_draws_its_process_table_with_the_page_not_after_it() -> None:
    """A table that filled in once the page had loaded moved the strategy and storm forms below it
    under a pointer about to press them. The table comes with the page and is only polled after."""
    page = _client([]).get("/chaos")
    assert page.status_code == 200
    table = re.search(
        r'<div hx-get="/fragments/processes" hx-trigger="([^"]*)"[^>]*>\s*<table class="processes">', page.text
    )
    assert table, page.text[:2000]
    assert "load" not in table.group(1)
    assert page.text.index('class="processes"') < page.text.index('id="storm"')
