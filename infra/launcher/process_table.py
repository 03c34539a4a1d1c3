"""The machine's processes as /proc lists them: what killing a process tree and counting a tree's
CPU both walk."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


def stat_fields() -> Iterator[tuple[int, list[str]]]:
    """Each live process's pid and the fields of its /proc/PID/stat after its command's name (the
    state first, then the parent's pid; utime is index 11). One that ends meanwhile is left out."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        yield int(entry.name), fields
