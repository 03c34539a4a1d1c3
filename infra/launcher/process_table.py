"""The machine's processes as /proc lists them: what killing a process tree and counting a tree's
CPU both walk."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


def stat_fields() -> Iterator[tuple[int, list[str]]]:
    """Each live process's pid and its `stat_fields_of`. One that ends meanwhile is left out."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = stat_fields_of(int(entry.name))
        except OSError:
            continue  # ended meanwhile
        yield int(entry.name), fields


def stat_fields_of(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the process's command's name (the state first, then the
    parent's pid; utime is index 11). OSError when there is no such process."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
