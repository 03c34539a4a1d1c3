"""A bad value in a consumer's environment stops the process at start, naming the variable, in every
implementation of the inventory slot (docs/consumer-process-contract.md): a port or a member count
that is not a whole number in its range is refused, never truncated to one or left to fail later."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.stacks import JAVA_QUICK_START, java_inventory_command, node_inventory_command

COMMANDS = {
    "python": lambda: [sys.executable, "-m", "services.inventory"],
    "java": java_inventory_command,
    "node": node_inventory_command,
}
EXIT_STATUS = {"python": 1, "java": 2, "node": 2}
REFUSED = [("CONTROL_PORT", "80.5"), ("CONTROL_PORT", "0"), ("CONTROL_PORT", "70000"), ("CONSUMER_MEMBERS", "2.5")]


@pytest.mark.parametrize("implementation", sorted(COMMANDS))
def test_a_setting_that_is_not_a_whole_number_in_its_range_stops_the_process_naming_it(implementation: str) -> None:
    command = COMMANDS[implementation]()
    for variable, value in REFUSED:
        environment = {
            "PATH": "/usr/bin:/bin",
            "DATABASE_URL": "postgresql://inventory:secret@127.0.0.1:9/inventory",
            "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9",
            "JAVA_TOOL_OPTIONS": JAVA_QUICK_START,
            variable: value,
        }
        done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=60, check=False)
        said = done.stdout + done.stderr
        assert done.returncode == EXIT_STATUS[implementation], (variable, value, said[-2000:])
        assert variable in said.splitlines()[-1], (variable, value, said[-2000:])
