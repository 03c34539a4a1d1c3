"""Place orders at a steady rate, with a mix of outcomes: `make load RATE=20 COUNT=300`.

The mix: most orders are in stock and paid with a card that passes; some use a card the
provider declines (the order is cancelled and its stock released); some ask for the scarce SKU
(they are rejected once it is gone). Progress is printed every second.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import httpx

from services.saga_contract import CATALOG, PAYMENT_METHOD_DECLINED, PAYMENT_METHOD_OK
from services.settings import Settings

PLENTIFUL = [sku for sku, product in CATALOG.items() if product.initial_stock > 1_000]
SCARCE = [sku for sku, product in CATALOG.items() if product.initial_stock <= 1_000]


@dataclass
class LoadResult:
    order_ids: list[str] = field(default_factory=list)
    kinds: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)


def order_body(kind: str, rng: random.Random) -> dict[str, object]:
    if kind == "scarce":
        lines = [{"sku": rng.choice(SCARCE), "quantity": rng.randint(1, 2)}]
    else:
        skus = rng.sample(PLENTIFUL, rng.randint(1, 3))
        lines = [{"sku": sku, "quantity": rng.randint(1, 3)} for sku in skus]
    method = PAYMENT_METHOD_DECLINED if kind == "declined" else PAYMENT_METHOD_OK
    return {"customer_email": f"customer-{rng.randint(1, 999)}@example.com", "lines": lines, "payment_method": method}


def place_orders(
    url: str,
    rate: float,
    count: int,
    seed: int = 7,
    quiet: bool = False,
    stop: threading.Event | None = None,
    result: LoadResult | None = None,
) -> LoadResult:
    """Place `count` orders at `rate` per second (until `stop` is set); return their ids and what
    went wrong. Pass `result` to watch it fill while this runs."""
    rng = random.Random(seed)
    result = result if result is not None else LoadResult()
    interval = 1 / rate
    started = next_at = time.monotonic()
    last_report = started
    with httpx.Client(base_url=url, timeout=10) as client:
        for n in range(count):
            pause = next_at - time.monotonic()
            if stop is not None:
                if stop.wait(max(0.0, pause)):
                    break
            elif pause > 0:
                time.sleep(pause)  # pacing the load
            next_at += interval
            kind = rng.choices(["ok", "declined", "scarce"], weights=[70, 15, 15])[0]
            try:
                response = client.post(
                    "/orders", json=order_body(kind, rng), headers={"Idempotency-Key": f"load-{uuid.uuid4()}"}
                )
                if response.status_code in (200, 201):
                    result.order_ids.append(response.json()["order_id"])
                    result.kinds[kind] += 1
                else:
                    result.failures[f"HTTP {response.status_code}"] += 1
            except httpx.HTTPError as error:
                result.failures[type(error).__name__] += 1
            now = time.monotonic()
            if not quiet and (now - last_report >= 1 or n == count - 1):
                last_report = now
                placed = len(result.order_ids)
                print(
                    f"\r  placed {placed}/{count} ({placed / max(now - started, 1e-9):.1f}/s)"
                    f"  failed {sum(result.failures.values())}",
                    end="",
                    flush=True,
                )
    if not quiet:
        print()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--url",
        default=f"http://127.0.0.1:{Settings().ORDERS_API_PORT}",
        help="the order API (default: this system's, on ORDERS_API_PORT)",
    )
    parser.add_argument("--rate", type=float, default=20)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    arguments = parser.parse_args(argv)
    if arguments.rate <= 0 or arguments.count <= 0:
        parser.error("RATE and COUNT must be positive")
    print(f"placing {arguments.count} orders at {arguments.rate:g}/s against {arguments.url}")
    try:
        result = place_orders(arguments.url, arguments.rate, arguments.count, arguments.seed)
    except KeyboardInterrupt:
        return 130
    print(f"done: {dict(result.kinds)}" + (f"; failures {dict(result.failures)}" if result.failures else ""))
    return 1 if result.failures else 0


if __name__ == "__main__":
    sys.exit(main())
