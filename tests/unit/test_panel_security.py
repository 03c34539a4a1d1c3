"""Who may press the panel's buttons: token beyond loopback, same origin and CSRF everywhere.

The panel runs in-process with no system behind it: reset is the one action asked for, and it only
reports that nothing answered. The running system's controls are tested in tests/e2e/panel/.
"""

from __future__ import annotations

from fastapi.testclient import TestClient

from chaos_panel.settings import PanelSettings
from chaos_panel.web.app import create_app

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
    return TestClient(create_app(settings), base_url="http://127.0.0.1:8080")


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
    assert client.post("/api/reset", json={}, headers={"Origin": "http://127.0.0.1:8080"}).status_code == 200


def test_beyond_loopback_every_action_needs_the_token() -> None:
    client = _client(host="0.0.0.0", token="s3cret-token")
    assert client.post("/api/reset", json={}).status_code == 403
    wrong = client.post("/api/reset", json={}, headers={"Authorization": "Bearer guess"})
    assert wrong.status_code == 403 and "token" in wrong.json()["detail"]
    right = client.post("/api/reset", json={}, headers={"Authorization": "Bearer s3cret-token"})
    assert right.status_code == 200
    assert "buttons need the panel's token" in client.get("/login").text


def test_beyond_loopback_reads_need_the_token_too() -> None:
    client = _client(host="0.0.0.0", token="s3cret-token")
    for path in ("/api/state", "/api/orders", "/api/parked", "/fragments/orders", "/api/audit"):
        answer = client.get(path)
        assert answer.status_code == 401 and "token" in answer.json()["detail"], path
    for page in ("/", "/orders", "/chaos", "/dead-letters", "/parked"):
        answer = client.get(page, follow_redirects=False)
        assert answer.status_code == 303 and answer.headers["location"] == "/login", page
    assert client.get("/healthz").status_code == 200
    authorised = client.get("/api/parked", headers={"Authorization": "Bearer s3cret-token"})
    assert authorised.status_code == 200


def test_the_login_form_checks_the_token_before_it_becomes_a_cookie() -> None:
    client = _client(host="0.0.0.0", token="s3cret-token")
    page = client.get("/login")
    assert 'method="post"' in page.text and "0.0.0.0:8080" in page.text and "beyond loopback" in page.text
    assert client.get("/login", params={"token": "s3cret-token"}).status_code == 200
    assert "eo_panel_token" not in client.cookies  # a token in a URL is never taken
    form_csrf = client.cookies["eo_csrf"]
    wrong = client.post("/login", data={"token": "guess", "csrf_token": form_csrf}, follow_redirects=False)
    assert wrong.status_code == 403 and "eo_panel_token" not in client.cookies
    right = client.post("/login", data={"token": "s3cret-token", "csrf_token": form_csrf}, follow_redirects=False)
    assert right.status_code == 303 and client.cookies["eo_panel_token"] == "s3cret-token"
    assert "buttons need the panel's token" not in client.get("/").text
    csrf = client.cookies["eo_csrf"]
    assert client.post("/api/reset", data={"csrf_token": csrf}).status_code == 200


def test_a_login_from_another_site_is_refused() -> None:
    client = _client(host="0.0.0.0", token="s3cret-token")
    answer = client.post("/login", data={"token": "s3cret-token"}, headers={"Origin": "http://evil.example"})
    assert answer.status_code == 403 and "eo_panel_token" not in client.cookies


def test_a_login_form_without_the_login_pages_csrf_token_is_refused() -> None:
    """Login CSRF: a page elsewhere could post a token of its own choosing into the browser."""
    for host, token in (("0.0.0.0", "s3cret-token"), ("127.0.0.1", "")):
        client = _client(host=host, token=token)
        for data in ({"token": "s3cret-token"}, {"token": "s3cret-token", "csrf_token": "forged"}):
            answer = client.post("/login", data=data, follow_redirects=False)
            assert answer.status_code == 403 and "CSRF" in answer.json()["detail"], (host, data)
        assert "eo_panel_token" not in client.cookies


def test_an_origin_of_another_scheme_is_another_origin() -> None:
    """An https page on the panel's host and port is not the http panel."""
    client = _client()
    for headers in ({"Origin": "https://127.0.0.1:8080"}, {"Referer": "https://127.0.0.1:8080/chaos"}):
        answer = client.post("/api/reset", json={}, headers=headers)
        assert answer.status_code == 403 and "another" in answer.json()["detail"], headers
    assert client.post("/api/reset", json={}, headers={"Referer": "http://127.0.0.1:8080/chaos"}).status_code == 200


def test_on_loopback_the_login_page_says_no_token_is_needed() -> None:
    text = _client().get("/login").text
    assert "127.0.0.1:8080" in text and "loopback only" in text and "<form" not in text.split("<main>")[1]


def test_a_foreign_host_is_refused_before_anything_is_read_or_done() -> None:
    """DNS rebinding: a page under a foreign name that resolves to 127.0.0.1."""
    client = _client()
    for path in ("/api/state", "/", "/api/parked"):
        answer = client.get(path, headers={"Host": "rebind.attacker.example:8080"})
        assert answer.status_code == 400 and "Host" in answer.json()["detail"], path
    refused = client.post("/api/reset", json={}, headers={"Host": "rebind.attacker.example"})
    assert refused.status_code == 400
    for host in ("localhost:8080", "127.0.0.1", "[::1]:8080", "10.1.2.3:8080"):
        assert client.get("/healthz", headers={"Host": host}).status_code == 200, host


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
