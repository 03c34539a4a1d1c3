"""The panel's hands: every running process's control endpoint, and the sandboxes' fault APIs.

Each background process serves /faults and /metrics (and consumers /strategy and /rewind) on its
control URL; the panel learns the names from CONTROL_URLS and asks each what it can do.
"""

from __future__ import annotations

from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

COUNTED_OUTCOMES = (
    "applied",
    "duplicate",
    "duplicate_with_different_content",
    "retryable_failure",
    "terminal_failure",
    "ignored",
)


class ControlError(Exception):
    """A control action the process refused or could not be asked (the message says which).
    `status` is what the panel answers: the process's own 4xx when it refused, 503 when it did
    not answer or could not do it."""

    def __init__(self, message: str, status: int = 503) -> None:
        super().__init__(message)
        self.status = status


def call(client: httpx.Client, method: str, service: str, url: str, timeout: float | None = None, **kwargs: Any) -> Any:
    """`service` answering `method url` with JSON, or a ControlError naming it: 503 when it does
    not answer or fails, its own 4xx when it refuses."""
    try:
        response = client.request(method, url, timeout=timeout or client.timeout, **kwargs)
    except httpx.HTTPError as error:
        raise ControlError(
            f"{service} does not answer ({type(error).__name__} at {url}): is it running?", 503
        ) from error
    try:
        body = response.json()
    except ValueError:
        body = {"error": response.text[:200]}
    if response.status_code >= 400:
        detail = (body.get("error") or body.get("detail")) if isinstance(body, dict) else body
        status = response.status_code if response.status_code < 500 else 503
        raise ControlError(f"{service} answered HTTP {response.status_code}: {str(detail)[:300]}", status)
    return body


EXECUTORS = ("payment-executor", "notification-dispatcher")
"""The processes that hold pending work, and so parked work (GET /parked, POST /redrive)."""


@dataclass
class ProcessState:
    name: str
    url: str
    up: bool = False
    error: str = ""
    points: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    armed: dict[str, dict[str, Any]] = field(default_factory=dict)
    fired: dict[str, int] = field(default_factory=dict)
    consumer: str | None = None
    strategy: str | None = None
    strategies: list[str] = field(default_factory=list)
    outcomes: dict[str, float] = field(default_factory=dict)
    """Outcome -> deliveries counted since the process started."""
    started_at: float | None = None
    topics: list[str] = field(default_factory=list)
    held: dict[str, float] = field(default_factory=dict)
    """Topic -> seconds its hold has left."""
    horizon_seconds: float | None = None
    configured_horizon_seconds: float | None = None
    stalled: list[str] = field(default_factory=list)
    """Partitions it holds with messages waiting and none consumed, `topic/partition`."""

    @property
    def horizon_shortened(self) -> bool:
        return self.horizon_seconds != self.configured_horizon_seconds


def stalled_partitions(exposition: str) -> list[str]:
    """The partitions a /metrics page reports stalled (eo_consumer_partition_stalled = 1)."""
    return sorted(
        f"{sample.labels.get('topic')}/{sample.labels.get('partition')}"
        for family in text_string_to_metric_families(exposition)
        if family.name == "eo_consumer_partition_stalled"
        for sample in family.samples
        if sample.value == 1
    )


def outcome_counts(exposition: str) -> dict[str, float]:
    """Sum eo_consumer_messages_total by outcome from a /metrics page."""
    counts: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(exposition):
        if family.name == "eo_consumer_messages":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    counts[sample.labels["outcome"]] += sample.value
    return {outcome: counts.get(outcome, 0.0) for outcome in COUNTED_OUTCOMES}


def start_time(exposition: str) -> float | None:
    for family in text_string_to_metric_families(exposition):
        if family.name == "process_start_time_seconds":
            return family.samples[0].value
    return None


class ControlPlane:
    def __init__(
        self,
        control_urls: dict[str, str],
        provider_url: str,
        mail_url: str,
        orders_api_url: str = "",
        timeout: float = 3.0,
        sandbox_password: str = "",
    ):
        self.control_urls = dict(control_urls)
        self._sandbox_admin = {"Authorization": f"Bearer {sandbox_password}"} if sandbox_password else {}
        self.sandboxes = {"payment-provider": provider_url, "mail": mail_url}
        self.http_services = {
            name: url for name, url in {"orders-api": orders_api_url, **self.sandboxes}.items() if url
        }
        """Processes with an HTTP API and no control endpoint: asked only whether they answer."""
        self._client = httpx.Client(timeout=timeout)

    def close(self) -> None:
        self._client.close()

    def _url(self, process: str) -> str:
        url = self.control_urls.get(process)
        if url is None:
            raise ControlError(
                f"no process called {process[:80]!r}; known: {', '.join(sorted(self.control_urls))}", 400
            )
        return url

    def _call(self, method: str, service: str, url: str, timeout: float | None = None, **kwargs: Any) -> Any:
        return call(self._client, method, service, url, timeout, **kwargs)

    # What runs ----------------------------------------------------------------------------------

    def state(self, name: str) -> ProcessState:
        state = ProcessState(name, self.control_urls[name])
        try:
            faults = self._call("GET", name, f"{state.url}/faults", timeout=2)
            metrics = self._client.get(f"{state.url}/metrics", timeout=2).text
        except (ControlError, httpx.HTTPError) as error:
            state.error = str(error)
            return state
        state.up = True
        state.points = list(faults.get("points", []))
        state.actions = list(faults.get("actions", []))
        state.armed = dict(faults.get("armed", {}))
        state.fired = dict(faults.get("fired", {}))
        state.consumer = faults.get("consumer")
        state.outcomes = outcome_counts(metrics) if state.consumer else {}
        state.stalled = stalled_partitions(metrics) if state.consumer else []
        state.started_at = start_time(metrics)
        if state.consumer:
            try:
                strategy = self._call("GET", name, f"{state.url}/strategy", timeout=2)
                state.strategy, state.strategies = strategy["strategy"], list(strategy["strategies"])
                holds = self._call("GET", name, f"{state.url}/hold", timeout=2)
                state.topics, state.held = list(holds["topics"]), dict(holds["held"])
                horizon = self._call("GET", name, f"{state.url}/horizon", timeout=2)
                state.horizon_seconds = horizon["seconds"]
                state.configured_horizon_seconds = horizon["configured_seconds"]
            except ControlError as error:
                state.error = str(error)
        return state

    def states(self) -> list[ProcessState]:
        """Every process's state, asked in parallel."""
        with ThreadPoolExecutor(max_workers=max(1, len(self.control_urls))) as pool:
            return list(pool.map(self.state, sorted(self.control_urls)))

    def http_states(self) -> list[ProcessState]:
        """Whether each HTTP service answers its health check."""

        def health(name: str) -> ProcessState:
            state = ProcessState(name, self.http_services[name])
            try:
                state.up = self._client.get(f"{state.url}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError as error:
                state.error = f"{type(error).__name__}"
            return state

        with ThreadPoolExecutor(max_workers=max(1, len(self.http_services))) as pool:
            return list(pool.map(health, sorted(self.http_services)))

    # Fault points ---------------------------------------------------------------------------------

    def arm(
        self,
        process: str,
        point: str,
        action: str,
        times: int | None = 1,
        probability: float = 1.0,
        stall_seconds: float = 5.0,
    ) -> None:
        self._call(
            "POST",
            process,
            f"{self._url(process)}/faults",
            json={
                "point": point,
                "action": action,
                "times": "always" if times is None else times,
                "probability": probability,
                "stall_seconds": stall_seconds,
            },
        )

    def disarm(self, process: str, point: str | None = None) -> None:
        self._call("DELETE", process, f"{self._url(process)}/faults", params={"point": point} if point else None)

    # Consumers ------------------------------------------------------------------------------------

    def set_strategy(self, process: str, strategy: str) -> None:
        self._call("POST", process, f"{self._url(process)}/strategy", json={"strategy": strategy})

    def rewind(self, process: str, to: str) -> list[dict[str, Any]]:
        body = self._call("POST", process, f"{self._url(process)}/rewind", json={"to": to}, timeout=40)
        return list(body.get("partitions", []))

    def rewind_every_consumer(self, to: str) -> dict[str, list[dict[str, Any]]]:
        """Rewind every consumer process (each replica too) to `to`: every group goes back, as the
        recovery after a failover that lost work does. A process that does not answer is skipped
        and named in the ControlError raised once the others are rewound (a process that is down
        cannot say whether it consumes, so every one that is down is named)."""
        states = self.states()
        consumers = [state.name for state in states if state.consumer]
        rewound: dict[str, list[dict[str, Any]]] = {}
        refused = [f"{state.name} did not answer (a consumer or not)" for state in states if not state.up]
        for process in consumers:
            try:
                rewound[process] = self.rewind(process, to)
            except ControlError as error:
                refused.append(f"{process}: {error}")
        if refused or not consumers:
            done = ", ".join(sorted(rewound)) or "none"
            raise ControlError(f"rewound {done}; not rewound: {'; '.join(refused) or 'no consumer answers'}")
        return rewound

    def hold(self, process: str, topic: str, seconds: float) -> list[dict[str, Any]]:
        body = self._call(
            "POST", process, f"{self._url(process)}/hold", json={"topic": topic, "seconds": seconds}, timeout=40
        )
        return list(body.get("partitions", []))

    def set_horizon(self, process: str, seconds: float | None, purge: bool = False) -> dict[str, Any]:
        return dict(
            self._call("POST", process, f"{self._url(process)}/horizon", json={"seconds": seconds, "purge": purge})
        )

    # Sandboxes ------------------------------------------------------------------------------------

    def sandbox_faults(self, sandbox: str) -> dict[str, Any]:
        return dict(self._call("GET", sandbox, f"{self.sandboxes[sandbox]}/admin/faults", headers=self._sandbox_admin))

    def set_sandbox_faults(self, sandbox: str, faults: dict[str, Any]) -> dict[str, Any]:
        if sandbox not in self.sandboxes:
            raise ControlError(f"no sandbox called {sandbox[:80]!r}; known: {', '.join(self.sandboxes)}", 400)
        url = f"{self.sandboxes[sandbox]}/admin/faults"
        return dict(self._call("PUT", sandbox, url, json=faults, headers=self._sandbox_admin))

    # Parked work ----------------------------------------------------------------------------------

    def parked(self) -> tuple[list[dict[str, Any]], list[str]]:
        """Every executor's parked work (each row with its process), and the executors that did
        not answer."""
        rows: list[dict[str, Any]] = []
        silent: list[str] = []
        for process in (name for name in EXECUTORS if name in self.control_urls):
            try:
                listing = self._call("GET", process, f"{self.control_urls[process]}/parked", timeout=5)
            except ControlError as error:
                silent.append(str(error))
                continue
            rows.extend({**row, "process": process, "service": listing.get("service")} for row in listing["parked"])
        return sorted(rows, key=lambda row: str(row.get("parked_at")), reverse=True), silent

    def redrive_parked(self, process: str, order_id: str) -> dict[str, Any]:
        if process not in EXECUTORS:
            raise ControlError(f"{process[:80]!r} holds no parked work; the executors are {', '.join(EXECUTORS)}", 400)
        return dict(
            self._call("POST", process, f"{self._url(process)}/redrive", json={"order_id": order_id}, timeout=10)
        )

    # Everything -----------------------------------------------------------------------------------

    def reset(self) -> list[str]:
        """Disarm every point, switch every consumer back to `correct`, release every held topic,
        restore every dedup horizon, clear the sandboxes' faults.
        Returns what could not be reached (the rest is reset)."""
        problems = []
        for state in self.states():
            if not state.up:
                problems.append(f"{state.name}: not running")
                continue
            try:
                self.disarm(state.name)
                if state.consumer and state.strategy != "correct":
                    self.set_strategy(state.name, "correct")
                for topic in state.held:
                    self.hold(state.name, topic, 0)
                if state.consumer and state.horizon_shortened:
                    self.set_horizon(state.name, None)
            except ControlError as error:
                problems.append(str(error))
        for sandbox, url in self.sandboxes.items():
            try:
                self._call("DELETE", sandbox, f"{url}/admin/faults", headers=self._sandbox_admin)
            except ControlError as error:
                problems.append(f"{sandbox}: {error}")
        return problems
