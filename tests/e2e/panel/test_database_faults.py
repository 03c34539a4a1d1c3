"""On the panel's one-server system, the PostgreSQL pair's controls say what they need and change
nothing; bad input is a 400 naming the field. (A pair's failover, detach and rewind run in
tests/e2e/test_soak.py and tests/e2e/test_postgres_pair.py, on pairs.)"""

from __future__ import annotations

from tests.e2e.panel.conftest import PanelSystem


def test_with_one_server_the_pair_controls_say_how_to_run_a_pair_and_bad_input_is_named(clean: PanelSystem) -> None:
    answer = clean.panel.get("/api/databases").json()
    assert answer["nodes"] == [] and "make up POSTGRES=ha" in answer["error"], answer
    page = clean.panel.get("/chaos").text
    assert 'id="postgres-nodes"' in page and 'id="failover"' not in page, "no buttons without a pair"
    fragment = clean.panel.get("/fragments/databases").text
    assert "make up POSTGRES=ha" in fragment
    for path in ("databases/failover", "databases/detach-standby", "databases/attach-standby"):
        refused = clean.panel.post(f"/api/{path}", json={})
        assert refused.status_code == 409 and "make up POSTGRES=ha" in refused.json()["message"], refused.text
    for path, body, named in (
        ("databases/sync", {"mode": "maybe"}, "mode must be on or off"),
        ("databases/sync", {}, "mode is required"),
        ("rewind-all", {"to": "yesterday"}, "to must be an ISO 8601 time"),
        ("rewind-all", {"to": "2026-12-06T10:00:00"}, "to must carry its time zone"),
        ("rewind-all", {}, "to is required"),
    ):
        refused = clean.panel.post(f"/api/{path}", json=body)
        assert refused.status_code == 400, (path, body, refused.text)
        assert named in refused.json()["message"], (path, body, refused.json())
    before = clean.panel.get("/api/databases").json()
    assert before == answer, "nothing changed"
