"""`python -m infra.launcher.broker_control`: the Kafka nodes' control endpoint, for the panel.

The Kafka nodes have no control endpoint of their own, and the panel reaches processes only over
HTTP. This small service, supervised beside the nodes on the native path, does what `make broker`
does (infra/launcher/broker_chaos.py) when asked:

  GET  /nodes                 each node: its process, state, whether it is the active controller,
                              whether it is frozen, and the partitions it leads
  POST /kill-leader           {"topic": "orders.events", "partition": 0}   SIGKILL its leader
  POST /freeze                {"node": 2, "seconds": 15}   SIGSTOP, then SIGCONT that much later
  POST /restart-controller    {}   stop the active controller's node and start it again

It answers only loopback (and ALLOWED_HOSTS) names, refuses cross-site requests and non-JSON
bodies (services/http_front_door.py). At start it thaws any node a previous run left frozen.
"""

from __future__ import annotations

import contextlib
import threading
import time
import xmlrpc.client
from typing import Any, Literal

import uvicorn
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from effectively_once.process import ProcessSettings, load
from infra.launcher import broker_chaos, kafka_broker
from infra.launcher.errors import LaunchError
from infra.launcher.supervisor import Supervisor
from services import http_front_door
from services.settings import Settings
from services.topology import all_topics

MAX_FREEZE_SECONDS = 120


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class KillLeader(_Strict):
    topic: Literal[all_topics()]  # type: ignore[valid-type]
    partition: int = Field(ge=0, le=63)


class Freeze(_Strict):
    node: int = Field(ge=1, le=3)
    seconds: float = Field(ge=1, le=MAX_FREEZE_SECONDS)


class RestartController(_Strict):
    pass


class Frozen:
    """Nodes frozen now, and when each thaws (the thaw itself is broker_chaos's timer)."""

    def __init__(self) -> None:
        self._until: dict[int, float] = {}
        self._lock = threading.Lock()

    def add(self, node: int, seconds: float) -> None:
        with self._lock:
            self._until[node] = time.monotonic() + seconds

    def left(self) -> dict[int, float]:
        now = time.monotonic()
        with self._lock:
            return {node: round(until - now, 1) for node, until in self._until.items() if until > now}


def create_app(settings: Settings) -> FastAPI:
    app = FastAPI(title="Kafka nodes' control endpoint", docs_url=None, redoc_url=None)
    frozen = Frozen()
    lock = threading.Lock()  # one fault at a time: two at once could take the quorum

    def cluster() -> tuple[Settings, Supervisor]:
        try:
            return broker_chaos.running_cluster(settings)
        except LaunchError as error:
            raise HTTPException(503, str(error)) from error

    def refused(error: Exception) -> HTTPException:
        return HTTPException(409 if isinstance(error, LaunchError) else 503, f"{type(error).__name__}: {error}")

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/nodes")
    def nodes() -> dict[str, Any]:
        running, supervisor = cluster()
        states = {info["name"]: info["statename"] for info in supervisor.all_info()}
        try:
            led = broker_chaos.leaders(running, timeout=2)  # a frozen node must not freeze the page
        except Exception as error:  # the cluster may be electing: show the nodes all the same
            led, problem = {}, f"{type(error).__name__}: {error}"
        else:
            problem = ""
        try:
            controller: int | None = broker_chaos.active_controller(running)
        except LaunchError:
            controller = None
        thawing = frozen.left()
        return {
            "nodes": [
                {
                    "node": node,
                    "process": name,
                    "state": states.get(name, "UNKNOWN"),
                    "frozen_seconds_left": thawing.get(node),
                    "controller": node == controller,
                    "leads": led.get(node, []),
                }
                for node, name in enumerate(kafka_broker.node_names(running), start=1)
            ],
            "replicated": running.BROKERS > 1,
            "problem": problem,
        }

    @app.post("/kill-leader")
    def kill_leader(request: KillLeader) -> dict[str, Any]:
        running, supervisor = cluster()
        with lock:
            try:
                fault = broker_chaos.kill_leader(running, supervisor, request.topic, request.partition)
            except Exception as error:
                raise refused(error) from error
        return {"fault": fault.describe(), "node": fault.node}

    @app.post("/freeze")
    def freeze(request: Freeze) -> dict[str, Any]:
        running, supervisor = cluster()
        if request.node > running.BROKERS:
            raise HTTPException(400, f"node: there are {running.BROKERS} node(s)")
        if request.node in frozen.left():
            raise HTTPException(409, f"node {request.node} is frozen already")
        with lock:
            try:
                fault = broker_chaos.freeze(running, supervisor, request.node, request.seconds)
            except Exception as error:
                raise refused(error) from error
            frozen.add(request.node, request.seconds)
        return {"fault": fault.describe(), "node": fault.node}

    @app.post("/restart-controller")
    def restart_controller(_: RestartController) -> dict[str, Any]:
        running, supervisor = cluster()
        with lock:
            try:
                fault = broker_chaos.restart_controller(running, supervisor)
            except Exception as error:
                raise refused(error) from error
        return {"fault": fault.describe(), "node": fault.node}

    http_front_door.install(app, "the Kafka nodes' control endpoint")
    return app


def thaw_every_node(settings: Settings) -> None:
    """SIGCONT every node: one frozen by a run of this service that died before thawing it."""
    try:
        running, supervisor = broker_chaos.running_cluster(settings)
    except LaunchError:
        return
    for name in kafka_broker.node_names(running):
        with contextlib.suppress(LaunchError, xmlrpc.client.Fault):  # a node not running has nothing to thaw
            supervisor.signal(name, "CONT")


def main() -> None:
    settings = Settings()
    port = load(ProcessSettings).CONTROL_PORT
    if port is None:
        raise SystemExit("broker control: CONTROL_PORT is not set (the launcher sets it)")
    thaw_every_node(settings)
    uvicorn.run(
        create_app(settings),
        host="127.0.0.1",
        port=port,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
