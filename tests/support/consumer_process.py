"""Start tests.support.ledger_consumer as a real process, and read what it logged."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import IO, Any

from effectively_once import logs
from services.settings import PROJECT_ROOT


@dataclass
class ConsumerProcess:
    consumer_name: str
    topic: str
    dead_letter_topic: str
    database_url: str
    bootstrap_servers: str
    environment: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    _output: IO[bytes] | None = None

    def start(self) -> ConsumerProcess:
        self._output = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the process
        environment = {
            **os.environ,
            "DATABASE_URL": self.database_url,
            "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap_servers,
            "EO_INSTANCE_ID": f"{self.consumer_name}-0",
            "LOG_LEVEL": "DEBUG",  # each delivery's outcome is logged at DEBUG: outcomes_for reads it
            "PYTHONPATH": str(PROJECT_ROOT),
            **self.environment,
        }
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.ledger_consumer",
                self.consumer_name,
                self.topic,
                self.dead_letter_topic,
            ],
            cwd=PROJECT_ROOT,
            env=environment,
            stdout=self._output,
            stderr=subprocess.STDOUT,
        )
        return self

    def wait(self, timeout: float = 60) -> int:
        assert self.process
        return self.process.wait(timeout)

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, then wait for a graceful exit."""
        assert self.process
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    @property
    def output(self) -> str:
        assert self._output
        self._output.seek(0)
        return self._output.read().decode(errors="replace")

    def log_entries(self) -> list[dict[str, Any]]:
        return logs.entries(self.output)

    def outcomes_for(self, message_id: str) -> list[str]:
        return [e["outcome"] for e in self.log_entries() if e.get("message_id") == message_id and "outcome" in e]
