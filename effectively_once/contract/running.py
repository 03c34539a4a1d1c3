"""A consumer process the black-box suite started, and its control endpoint as a client sees it.

Everything here goes through the process's environment, its exit status, its output and its
control endpoint (GET /metrics, GET/POST/DELETE /faults): the protocol any language serves
(docs/consumer-process-contract.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from typing import IO, Any

from prometheus_client.parser import text_string_to_metric_families

from ..kafka_client import ENVIRONMENT_VARIABLES as KAFKA_PRINCIPAL_VARIABLES
from .ports import free_port
from .process_subject import ProcessSubject

ACKNOWLEDGED = ("applied", "duplicate", "duplicate_with_different_content", "ignored", "terminal_failure")
"""The outcomes after which a delivery's offset is stored."""


def wait_for(condition: Callable[[], bool], timeout: float, what: str, tail: Callable[[], str] = str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{tail()}")
        time.sleep(0.05)


NO_ANSWER = (urllib.error.URLError, ConnectionError, TimeoutError)
"""What a request that got no answer at all raises: refused, reset or timed out."""


class ControlRequestFailed(AssertionError):
    """The process's control endpoint answered a request with an error: the answer and the
    process's last log lines say why."""


class RunningConsumer:
    """One consumer process, started with the contract's variables."""

    def __init__(
        self,
        subject: ProcessSubject,
        name: str,
        topics: Sequence[str],
        dead_letters: str,
        label: str = "a",
        **environment: str,
    ) -> None:
        self.name = name
        self.process_name = f"{name}-{label}"[:63]
        """Also the application_name of its database sessions: how the suite finds its backend."""
        self.port = free_port()
        self._output: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the process
        variables = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": os.environ.get("HOME", ""),
            # The Kafka principal of the process running the suite, if it has one.
            **{name: os.environ[name] for name in KAFKA_PRINCIPAL_VARIABLES if name in os.environ},
            **subject.environment,
            "DATABASE_URL": subject.database_url,
            "KAFKA_BOOTSTRAP_SERVERS": subject.bootstrap_servers,
            "CONSUMER_NAME": name,
            "CONSUMER_GROUP": f"{name}-{label}",
            "CONSUMER_TOPICS": ",".join(topics),
            "DEAD_LETTER_TOPIC": dead_letters,
            "CONTROL_HOST": "127.0.0.1",
            "CONTROL_PORT": str(self.port),
            "EO_PROCESS_NAME": self.process_name,
            "TELEMETRY_TOPIC": "",
            "MARKER_PURGE_INTERVAL_SECONDS": "0",
            "EO_FAULTS": "",
            **environment,
        }
        self.process = subprocess.Popen(
            list(subject.command),
            cwd=subject.cwd,
            env=variables,
            stdout=self._output,
            stderr=subprocess.STDOUT,
        )
        self._base = f"http://127.0.0.1:{self.port}"
        wait_for(self._answers, subject.start_timeout, f"{self.process_name} to serve /metrics", self.tail)

    def __enter__(self) -> RunningConsumer:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    # The control endpoint -------------------------------------------------------------------

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 10) -> Any:
        """The endpoint's answer; ControlRequestFailed, with the process's last lines, for an
        error or for no answer at all (the process's state then said too)."""
        try:
            return self._send(method, path, body, timeout)
        except NO_ANSWER as lost:
            raise ControlRequestFailed(
                f"{method} {path} got no answer ({type(lost).__name__}: {lost}); {self._state()}\n"
                f"{self.process_name}'s last lines:\n{self.tail()}"
            ) from lost

    def _send(self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 10) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self._base + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as refused:
            answer = refused.read().decode(errors="replace")[:500]
            raise ControlRequestFailed(
                f"{method} {path} answered {refused.code}: {answer}\n{self.process_name}'s last lines:\n{self.tail()}"
            ) from None
        return json.loads(raw) if path != "/metrics" else raw.decode()

    def _state(self) -> str:
        """Whether the process still runs, for a request that got no answer."""
        try:
            status = self.process.wait(2)  # a process that is exiting is given a moment to say how
        except subprocess.TimeoutExpired:
            return f"{self.process_name} still runs"
        return f"{self.process_name} exited {status}"

    def _answers(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(
                f"{self.process_name} exited {self.process.returncode} before it served:\n{self.tail()}"
            )
        try:
            self._send("GET", "/metrics")
        except NO_ANSWER:
            return False
        return True

    def arm(self, point: str, action: str, times: int = 1, stall_seconds: float = 60) -> None:
        self._request(
            "POST", "/faults", {"point": point, "action": action, "times": times, "stall_seconds": stall_seconds}
        )

    def rewind(self, to: str = "beginning") -> list[dict[str, Any]]:
        """POST /rewind: the process's partitions go back to `to` (a lab control, not every process
        has it). A member still joining its group is waited for up to 15 s before the rewind is
        served (the Python runtime's JOINING_GRACE_SECONDS, TypeScript's JOINING_GRACE_MS), so
        the answer is given longer than that."""
        partitions: list[dict[str, Any]] = self._request("POST", "/rewind", {"to": to}, timeout=45)["partitions"]
        return partitions

    def release(self) -> None:
        """Disarm every point: a stall in progress ends now."""
        self._request("DELETE", "/faults")

    def fired(self, point: str) -> int:
        return int(self._request("GET", "/faults").get("fired", {}).get(point, 0))

    def _samples(self, metric: str) -> list[tuple[dict[str, str], float]]:
        found = []
        for family in text_string_to_metric_families(self._request("GET", "/metrics")):
            for sample in family.samples:
                if sample.name == metric and sample.labels.get("consumer") == self.name:
                    found.append((dict(sample.labels), float(sample.value)))
        return found

    def outcomes(self) -> Counter[str]:
        """Deliveries by outcome (eo_consumer_messages_total, summed over event types)."""
        counted: Counter[str] = Counter()
        for labels, value in self._samples("eo_consumer_messages_total"):
            counted[labels.get("outcome", "")] += int(value)
        return counted

    def acknowledged(self) -> int:
        outcomes = self.outcomes()
        return sum(outcomes[outcome] for outcome in ACKNOWLEDGED)

    def retries(self, cause: str) -> int:
        return sum(int(v) for labels, v in self._samples("eo_consumer_retries_total") if labels.get("cause") == cause)

    def wait_acknowledged(self, count: int, timeout: float = 60) -> Counter[str]:
        wait_for(
            lambda: self.acknowledged() >= count, timeout, f"{self.process_name} to acknowledge {count}", self.tail
        )
        return self.outcomes()

    # The process -----------------------------------------------------------------------------

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return -1

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def tail(self, lines: int = 30) -> str:
        self._output.seek(0)
        return "\n".join(self._output.read().decode(errors="replace").splitlines()[-lines:])
