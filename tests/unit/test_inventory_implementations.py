"""INVENTORY_IMPL: which implementation the launcher runs in the inventory slot, with the same
contract variables whatever the language (docs/consumer-process-contract.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from infra.launcher import inventory_implementations, processes
from infra.launcher.supervisor import Program
from services.settings import Settings

CONTRACT_VARIABLES = {"DATABASE_URL", "KAFKA_BOOTSTRAP_SERVERS", "CONTROL_HOST", "CONTROL_PORT", "EO_PROCESS_NAME"}


def _programs(implementation: str, replicas: int = 1) -> dict[str, Program]:
    settings = Settings.model_validate(
        {"DATABASE_URL": None, "KAFKA_BOOTSTRAP_SERVERS": None, "REPLICAS": replicas, "INVENTORY_IMPL": implementation}
    )
    return {program.name: program for program in processes.platform_programs(settings)}


@pytest.mark.parametrize(
    ("implementation", "program"),  # the program's own arguments, after the runtime's options
    [
        ("python", ["-m", "services.inventory"]),
        ("java", inventory_implementations.java_program()),
        ("node", [str(inventory_implementations.NODE_MAIN)]),
    ],
)
def test_each_implementation_runs_in_every_inventory_replica_and_nowhere_else(
    implementation: str, program: list[str]
) -> None:
    programs = _programs(implementation, replicas=2)
    for name in ("inventory", "inventory-2"):
        command = programs[name].command
        assert command[-len(program) :] == program, command
        assert set(programs[name].environment) >= CONTRACT_VARIABLES
        assert programs[name].environment["EO_PROCESS_NAME"] == name
    assert programs["payment"].command[-2:] == ["-m", "services.payment"]
    runtime = {"python": Path(sys.executable).name, "java": "java", "node": "node"}[implementation]
    assert Path(programs["inventory"].command[0]).name == runtime


def test_an_unknown_implementation_is_refused_naming_the_variable() -> None:
    with pytest.raises(ValidationError, match="INVENTORY_IMPL"):
        Settings.model_validate({"DATABASE_URL": None, "KAFKA_BOOTSTRAP_SERVERS": None, "INVENTORY_IMPL": "cobol"})


def test_the_java_consumer_runs_from_the_jar_until_its_layout_is_newer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The extracted layout runs only when made from the current jar: a jar rebuilt by hand after it
    runs itself, never the layout's older classes; the class archive is named only when it exists."""
    jar = tmp_path / "inventory-java.jar"
    extracted = tmp_path / "extracted"
    monkeypatch.setattr(inventory_implementations, "JAVA_JAR", jar)
    monkeypatch.setattr(inventory_implementations, "JAVA_EXTRACTED", extracted)
    jar.write_bytes(b"jar")
    assert inventory_implementations.java_program() == ["-jar", str(jar)]
    extracted.mkdir()
    laid_out = extracted / "inventory-java.jar"
    laid_out.write_bytes(b"jar")
    assert inventory_implementations.java_program() == ["-jar", str(laid_out)]
    (extracted / "inventory-java.jsa").write_bytes(b"archive")
    assert inventory_implementations.java_program() == [
        f"-XX:SharedArchiveFile={extracted / 'inventory-java.jsa'}",
        "-jar",
        str(laid_out),
    ]
    later = laid_out.stat().st_mtime + 10
    os.utime(jar, (later, later))
    assert inventory_implementations.java_program() == ["-jar", str(jar)]
