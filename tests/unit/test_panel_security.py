"""Who may press the panel's buttons: token beyond loopback, same origin and CSRF everywhere.

The panel runs in-process with no system behind it: reset is the one action asked for, and it only
reports that nothing answered. The running system's controls are tested in tests/e2e/panel/.
"""

from __future__ import annotations

from fastapi.testclient import TestClient

from services.chaos_panel.app import create_app
from services.chaos_panel.settings import PanelSettings

NOWHERE = "http://127.0.0.1:9"


def _client(host: str = "127.0.0.1", token: str = "") -> TestClient:
    settings = PanelSettings(
        CHAOS_PANEL_HOST=host,
        CHAOS_PANEL_TOKEN=token,
        CONTROL_URLS={},
        PAYMENT_PROVIDER_URL=NOWHERE,
        MAIL_URL=NOWHERE,
        KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:9",
    )
    return TestClient(create_app(settings), base_url="http://panel.test")


def test_on_loopback_json_needs_no_token() -> None:
    answer = _client().post("/api/reset", json={})
    assert answer.status_code == 200 and answer.json()["ok"]


def test_a_form_post_needs_the_csrf_token_of_its_page() -> None:
    client = _client()
    refused = client.post("/api/reset", data={})
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]
    client.get("/")
    csrf = client.cookies["eo_csrf"]
    assert client.post("/api/reset", data={"csrf_token": "forged"}).status_code == 403
    assert client.post("/api/reset", data={"csrf_token": csrf}).status_code == 200
    assert client.post("/api/reset", data={}, headers={"X-CSRF-Token": csrf}).status_code == 200


def test_the_csrf_cookie_is_http_only_and_same_site_strict() -> None:
    cookie = _client().get("/").headers["set-cookie"]
    assert "eo_csrf=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie


def test_requests_from_another_site_are_refused_even_as_json() -> None:
    client = _client()
    for headers in (
        {"Origin": "http://evil.example"},
        {"Referer": "http://evil.example/page"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Origin": "null"},
    ):
        answer = client.post("/api/reset", json={}, headers=headers)
        assert answer.status_code == 403 and "another site" in answer.json()["detail"], headers
    assert client.post("/api/reset", json={}, headers={"Origin": "http://panel.test"}).status_code == 200


def test_beyond_loopback_every_action_needs_the_token() -> None:
    client = _client(host="0.0.0.0", token="s3cret-token")
    assert client.post("/api/reset", json={}).status_code == 403
    wrong = client.post("/api/reset", json={}, headers={"Authorization": "Bearer guess"})
    assert wrong.status_code == 403 and "token" in wrong.json()["detail"]
    right = client.post("/api/reset", json={}, headers={"Authorization": "Bearer s3cret-token"})
    assert right.status_code == 200
    assert "buttons need the panel's token" in client.get("/").text


def test_the_login_link_sets_the_token_cookie_for_the_pages() -> None:
    client = _client(host="0.0.0.0", token="s3cret-token")
    client.get("/login", params={"token": "s3cret-token"}, follow_redirects=False)
    assert "buttons need the panel's token" not in client.get("/").text
    csrf = client.cookies["eo_csrf"]
    assert client.post("/api/reset", data={"csrf_token": csrf}).status_code == 200


def test_beyond_loopback_without_a_token_one_is_made_up() -> None:
    first = create_app(PanelSettings(CHAOS_PANEL_HOST="0.0.0.0", KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:9"))
    second = create_app(PanelSettings(CHAOS_PANEL_HOST="0.0.0.0", KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:9"))
    tokens = {first.state.panel.guard.token, second.state.panel.guard.token}
    assert len(tokens) == 2 and all(len(token) >= 24 for token in tokens)
    assert first.state.panel.guard.token_required
    assert not create_app(PanelSettings(CHAOS_PANEL_HOST="localhost")).state.panel.guard.token_required


def test_pages_forbid_framing_and_foreign_scripts() -> None:
    headers = _client().get("/").headers
    assert headers["x-frame-options"] == "DENY"
    assert "default-src 'self'" in headers["content-security-policy"]
