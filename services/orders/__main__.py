"""`python -m services.orders api` serves the order API; `... saga` runs the saga consumer."""

from __future__ import annotations

import sys

from prometheus_client import REGISTRY

from effectively_once.process import load
from services import consumer_process
from services import saga_contract as contract
from services.http_process import OrdersApiSettings, serve_http
from services.orders.api import create_app
from services.orders.saga import follow_saga_event
from services.orders.saga_metrics import SagaStatesCollector

SAGA_EVENTS = (
    contract.INVENTORY_RESERVED,
    contract.INVENTORY_RESERVATION_FAILED,
    contract.INVENTORY_RELEASED,
    contract.PAYMENT_AUTHORIZED,
    contract.PAYMENT_FAILED,
    contract.NOTIFICATION_SENT,
    contract.NOTIFICATION_FAILED,
    contract.ORDER_PLACED,
)


def main() -> None:
    role = sys.argv[1] if len(sys.argv) > 1 else "api"
    if role == "api":
        settings = load(OrdersApiSettings)
        REGISTRY.register(SagaStatesCollector(settings.DATABASE_URL))
        serve_http("orders-api", create_app(settings.DATABASE_URL), settings, *settings.listen)
    elif role == "saga":
        consumer_process.run("orders-saga-v1", dict.fromkeys(SAGA_EVENTS, follow_saga_event))
    else:
        raise SystemExit(f"unknown role {role!r}: api or saga")


if __name__ == "__main__":
    main()
