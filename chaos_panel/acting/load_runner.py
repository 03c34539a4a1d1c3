"""Orders placed from the panel: one at a time, or a load at a rate in the background."""

from __future__ import annotations

import random
import threading
import time
import uuid
from dataclasses import dataclass, field

import httpx

from chaos_panel.acting.control_endpoints import ControlError
from services.orders.load import LoadResult, order_body, place_orders

MAX_RATE = 200.0
MAX_COUNT = 100_000
PLACE_TIMEOUT_SECONDS = 35.0
"""How long one order may take: the orders API itself waits up to 30 s for a database connection
(its pool's timeout), and under synchronous replication a commit waits for the standby's flush."""


@dataclass
class LoadRun:
    rate: float
    count: int
    started: float = field(default_factory=time.time)
    result: LoadResult = field(default_factory=LoadResult)
    stop: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def placed(self) -> int:
        return len(self.result.order_ids)

    @property
    def failed(self) -> int:
        return sum(self.result.failures.values())


class LoadRunner:
    def __init__(self, orders_api_url: str) -> None:
        self.url = orders_api_url
        self.current: LoadRun | None = None
        self._lock = threading.Lock()

    def place_one(self, kind: str = "ok") -> str:
        """Place one order of `kind` (ok, declined or scarce); return its id."""
        if kind not in ("ok", "declined", "scarce"):
            raise ValueError("kind must be ok, declined or scarce")
        body = order_body(kind, random.Random())
        try:
            response = httpx.post(
                f"{self.url}/orders",
                json=body,
                headers={"Idempotency-Key": f"panel-{uuid.uuid4()}"},
                timeout=PLACE_TIMEOUT_SECONDS,
            )
        except httpx.HTTPError as error:
            raise ControlError(
                f"orders-api does not answer ({type(error).__name__} at {self.url}): is it running?"
            ) from None
        if response.status_code >= 500:
            raise ControlError(f"orders-api answered HTTP {response.status_code}: {response.text[:200]}")
        if response.status_code not in (200, 201):
            raise ValueError(f"the order API answered {response.status_code}: {response.text[:200]}")
        return str(response.json()["order_id"])

    def start(self, rate: float, count: int) -> LoadRun:
        if not 0 < rate <= MAX_RATE:
            raise ValueError(f"rate must be above 0 and at most {MAX_RATE:.0f} orders a second")
        if not 0 < count <= MAX_COUNT:
            raise ValueError(f"count must be between 1 and {MAX_COUNT}")
        with self._lock:
            if self.current is not None and not self.current.done.is_set():
                raise ValueError("a load is already running: stop it first")
            run = LoadRun(rate, count)
            self.current = run

        def work() -> None:
            try:
                place_orders(self.url, rate, count, seed=int(run.started), quiet=True, stop=run.stop, result=run.result)
            finally:
                run.done.set()

        threading.Thread(target=work, name="panel-load", daemon=True).start()
        return run

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop.set()
