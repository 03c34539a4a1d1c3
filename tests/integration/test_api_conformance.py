"""The HTTP APIs answer as their OpenAPI documents say: schemathesis drives the orders API and the
payment provider from their own documents, with its conformance checks on (every status code
documented, every body and header as documented, no 500, methods not allowed say what is).

One check is left out: positive data acceptance, which expects every request the schema allows
to be accepted. An Idempotency-Key already used with another body is refused (422) whatever the
schema says, and one order may name a SKU on one line only: rules of the business, which a
document of shapes cannot hold. Both refusals are documented answers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import service_schema
from tests.support.sandboxes import ADMIN_PASSWORD, running

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
EXAMPLES = "60"
ADMIN = "/admin/faults"


def _conformance(url: str, *options: str) -> None:
    command = [
        str(SCHEMATHESIS),
        "run",
        f"{url}/openapi.json",
        "--checks",
        "all",
        "--exclude-checks",
        "positive_data_acceptance",
        "--max-examples",
        EXAMPLES,
        "--seed",
        "20261205",
        "--workers",
        "1",
        "--no-color",
        *options,
    ]
    environment = {**os.environ, "SCHEMATHESIS_TELEMETRY": "false"}
    with tempfile.TemporaryDirectory(prefix="schemathesis-") as scratch:  # its cache stays out of the tree
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=600, env=environment, check=False, cwd=scratch
        )
    assert done.returncode == 0, f"{' '.join(command[:3])} found what the document does not say:\n{done.stdout[-6000:]}"
    assert "passed" in done.stdout, done.stdout[-2000:]


@pytest.fixture(scope="module")
def orders_api(runtime_db: str) -> Iterator[str]:
    url = service_schema(runtime_db, "orders", as_url=True)
    with running("services.orders", url, "ORDERS_API_HOST", "ORDERS_API_PORT") as base:
        yield base


def test_the_orders_api_answers_as_its_openapi_document_says(orders_api: str) -> None:
    _conformance(orders_api)


@pytest.mark.parametrize("sandbox", ["provider", "mail"])
def test_a_sandbox_answers_as_its_openapi_document_says_its_admin_routes_apart(
    sandbox: str, request: pytest.FixtureRequest
) -> None:
    """Its business routes with no faults set, then its admin routes with the admin password (they
    set faults at random, and a fault set makes the business routes fail on purpose)."""
    client = request.getfixturevalue(sandbox).client
    url = str(client.base_url).rstrip("/")
    client.delete("/admin/faults")
    _conformance(url, "--exclude-path", ADMIN)
    try:
        _conformance(url, "--include-path", ADMIN, "--header", f"Authorization: Bearer {ADMIN_PASSWORD}")
    finally:
        client.delete("/admin/faults")
