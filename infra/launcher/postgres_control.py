"""`python -m infra.launcher.postgres_control`: the PostgreSQL pair's control endpoint, for the panel.

With POSTGRES=ha the launcher supervises this small service beside the two nodes; it does what
`make db` does (infra/launcher/postgres_pair.py) when asked:

  GET  /nodes             each node: its process, state, role (primary or standby) and replication;
                          the replication mode; every failover so far
  POST /failover          {}   SIGKILL the primary, promote the standby, rebuild the old primary
  POST /detach-standby    {}   stop the standby's WAL receiver (it falls behind)
  POST /attach-standby    {}   start it again (it catches up through its slot)
  POST /sync              {"on": false}   commits wait for the standby (true) or not (false)

It answers only loopback (and ALLOWED_HOSTS) names, refuses cross-site requests and non-JSON
bodies (services/http_front_door.py).
"""

from __future__ import annotations

import threading
from dataclasses import asdict
from typing import Any

import psycopg
import uvicorn
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict

from effectively_once.process import ProcessSettings, load
from infra.launcher import postgres_cluster, postgres_pair
from infra.launcher.errors import LaunchError
from infra.launcher.supervisor import Supervisor
from services import http_front_door
from services.settings import Settings


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Nothing(_Strict):
    pass


class Sync(_Strict):
    on: bool


def create_app(settings: Settings) -> FastAPI:
    app = FastAPI(title="PostgreSQL pair's control endpoint", docs_url=None, redoc_url=None)
    lock = threading.Lock()  # one change of the pair at a time

    def supervisor() -> Supervisor:
        running = Supervisor(settings.EO_STATE_DIR)
        if not running.is_running():
            raise HTTPException(503, "the system is not running")
        return running

    def act(change: Any) -> dict[str, Any]:
        if not lock.acquire(blocking=False):
            raise HTTPException(409, "another change of the pair is under way")
        try:
            return {"fault": change()}
        except (LaunchError, psycopg.Error) as error:
            raise HTTPException(409, f"{type(error).__name__}: {error}") from error
        finally:
            lock.release()

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/nodes")
    def nodes() -> dict[str, Any]:
        shown = postgres_pair.nodes(settings, supervisor())
        try:
            synchronous: bool | None = postgres_pair.is_synchronous(settings)
        except psycopg.Error:
            synchronous = None
        return {
            "nodes": [asdict(node) for node in shown],
            "primary": postgres_pair.primary_node(settings),
            "synchronous": synchronous,
            "failovers": [asdict(failover) for failover in postgres_pair.failovers(settings)],
        }

    @app.post("/failover")
    def failover(_: Nothing) -> dict[str, Any]:
        running = supervisor()
        bindir = postgres_cluster.find_bindir()
        if bindir is None:
            raise HTTPException(503, "no PostgreSQL server binaries found")
        return act(lambda: postgres_pair.failover(bindir, settings, running, lambda _: None).describe())

    @app.post("/detach-standby")
    def detach(_: Nothing) -> dict[str, Any]:
        supervisor()
        return act(lambda: postgres_pair.detach_standby(settings))

    @app.post("/attach-standby")
    def attach(_: Nothing) -> dict[str, Any]:
        supervisor()
        return act(lambda: postgres_pair.attach_standby(settings))

    @app.post("/sync")
    def sync(request: Sync) -> dict[str, Any]:
        supervisor()

        def change() -> str:
            postgres_pair.set_synchronous(settings, request.on)
            return "commits wait for the standby" if request.on else "the standby follows asynchronously"

        return act(change)

    http_front_door.install(app, "the PostgreSQL pair's control endpoint")
    return app


def main() -> None:
    settings = Settings()
    port = load(ProcessSettings).CONTROL_PORT
    if port is None:
        raise SystemExit("postgres control: CONTROL_PORT is not set (the launcher sets it)")
    uvicorn.run(create_app(settings), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
