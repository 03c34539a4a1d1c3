"""The CPU the launcher's processes have used so far, read from /proc: what a benchmark reads
before and after a run to say what each process spent on it."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from infra.launcher import kafka_broker, postgres_cluster, process_table
from infra.launcher.supervisor import Supervisor, pid_path

SUPERVISOR = "supervisord"
"""The supervisor's own entry: it copies every program's output into its log file, so what the
programs log costs CPU there too."""


def supervised_cpu_seconds(state_dir: Path) -> dict[str, float]:
    """Each process the supervisor in `state_dir` runs: its user + system CPU seconds so far, its
    descendants' included (the PostgreSQL backends are the postmaster's children); and the
    supervisor's own, under SUPERVISOR (its programs not included). Empty when no supervisor runs
    there (a server the launcher does not run is not read)."""
    supervisor = Supervisor(state_dir)
    if not supervisor.is_running():
        return {}
    roots = {str(info["name"]): int(info["pid"]) for info in supervisor.all_info() if info.get("pid")}
    spent = trees_cpu_seconds(*_processes(), roots=roots.values())
    return {name: spent[pid] for name, pid in roots.items()} | {SUPERVISOR: _own_cpu_seconds(pid_path(state_dir))}


def _own_cpu_seconds(pid_file: Path) -> float:
    """The user + system CPU seconds of the process whose pid `pid_file` holds, without its
    children's (a program the supervisor reaped would count as the supervisor's); 0 when it is
    not there."""
    try:
        fields = process_table.stat_fields_of(int(pid_file.read_text()))
    except (OSError, ValueError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def trees_cpu_seconds(own: Mapping[int, float], parent: Mapping[int, int], roots: Iterable[int]) -> dict[int, float]:
    """Each root's CPU seconds with every descendant's, from each process's own (`own`) and its
    parent (`parent`); a root not found counts nothing."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)

    def tree(pid: int) -> float:
        return own.get(pid, 0.0) + sum(tree(child) for child in children.get(pid, []) if child != pid)

    return {root: tree(root) for root in roots}


def servers_cpu_seconds(state_dir: Path) -> tuple[float, float]:
    """(PostgreSQL's, Kafka's) CPU seconds so far, every node's, as supervised_cpu_seconds reads them."""
    cpu = supervised_cpu_seconds(state_dir)
    postgres = sum(seconds for name, seconds in cpu.items() if postgres_cluster.is_node_name(name))
    kafka = sum(seconds for name, seconds in cpu.items() if kafka_broker.is_node_name(name))
    return postgres, kafka


def _processes() -> tuple[dict[int, float], dict[int, int]]:
    """Every live process's CPU seconds and its parent, from /proc: its own user + system time and
    that of its children that have ended (a PostgreSQL session that closed is its postmaster's
    then), so that a tree's sum never goes back when one of its processes ends."""
    ticks = os.sysconf("SC_CLK_TCK")
    cpu, parent = {}, {}
    for pid, fields in process_table.stat_fields():
        parent[pid] = int(fields[1])
        cpu[pid] = sum(int(ticks_spent) for ticks_spent in fields[11:15]) / ticks  # utime stime cutime cstime
    return cpu, parent
