"""The dashboards are code: the committed JSON is what the code builds, and it is sound."""

from __future__ import annotations

import json

import pytest

from dashboards.__main__ import GENERATED
from dashboards.build import DASHBOARDS, expressions, render


@pytest.mark.parametrize("name", list(DASHBOARDS))
def test_the_committed_json_is_what_the_code_builds(name: str) -> None:
    committed = GENERATED / f"{name}.json"
    assert committed.exists(), f"{committed} is missing: run `make dashboards`"
    assert committed.read_text() == render(name), f"{committed} is stale: run `make dashboards` and commit it"


@pytest.mark.parametrize("name", list(DASHBOARDS))
def test_every_panel_has_a_unique_id_and_queries_the_provisioned_prometheus(name: str) -> None:
    document = json.loads(render(name))
    ids = [panel["id"] for panel in document["panels"]]
    assert len(ids) == len(set(ids))
    uids = {json.loads(render(other))["uid"] for other in DASHBOARDS}
    assert len(uids) == len(DASHBOARDS)
    for panel in document["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)) and all(refs)
        assert all(target["datasource"]["uid"] == "prometheus" for target in panel["targets"])
    assert list(expressions(document))


def test_the_panel_links_every_dashboard_by_its_uid() -> None:
    from chaos_panel.web.pages import GRAFANA_DASHBOARDS

    assert set(GRAFANA_DASHBOARDS) == {json.loads(render(name))["uid"] for name in DASHBOARDS}


def test_a_chart_scales_its_lines_into_the_box_and_drops_nan() -> None:
    from chaos_panel.drawing.charts import CHARTS, HEIGHT, WIDTH, draw

    chart = draw(CHARTS[0], [("applied", [(0.0, 0.0), (5.0, 10.0), (10.0, float("nan"))])], 0.0, 10.0)
    (line,) = chart.lines
    assert chart.top == 10.0 and line.last == 10.0
    assert line.points == f"0.0,{HEIGHT:.1f} {WIDTH / 2:.1f},0.0"


@pytest.mark.parametrize(
    ("count", "shown"),
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 kB"), (84_900, "82.9 kB"), (18_245_000, "17.4 MB"), (3 << 30, "3.0 GB")],
)
def test_sizes_read_in_the_unit_that_suits_them(count: int, shown: str) -> None:
    from chaos_panel.drawing.charts import BYTES, SLOT_CHARTS, Chart, byte_size

    assert byte_size(count) == shown
    assert SLOT_CHARTS[0].unit == BYTES and Chart("slots", BYTES).shown(count) == shown
    assert Chart("lag", " msgs").shown(1234.5) == "1.23e+03 msgs"


def test_with_grafana_the_panel_links_its_dashboards() -> None:
    from fastapi.testclient import TestClient

    from chaos_panel.settings import PanelSettings
    from chaos_panel.web.app import create_app

    settings = PanelSettings(GRAFANA_URL="http://127.0.0.1:3000/", KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:9")
    home = TestClient(create_app(settings), base_url="http://127.0.0.1:8080").get("/overview").text
    for name in DASHBOARDS:
        assert f'href="http://127.0.0.1:3000/d/{json.loads(render(name))["uid"]}"' in home
    assert "/fragments/charts" not in home  # no Prometheus configured: no charts
