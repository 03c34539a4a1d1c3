"""`python -m labs NAME [NAME …]`, `all`, or nothing for the list: runs labs against the panel."""

from __future__ import annotations

import argparse
import sys

from labs.catalog import BY_NAME, LABS
from labs.client import LabError, PanelClient
from labs.lab import run
from services.settings import Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make lab NAME=…", description="Run workshop labs unattended and check them.")
    parser.add_argument("names", nargs="*", help="lab names, or `all`; none lists them")
    parser.add_argument("--panel", help="the chaos panel's URL (default: this machine's, from the settings)")
    parser.add_argument("--token", help="CHAOS_PANEL_TOKEN, when the panel is bound beyond loopback")
    parser.add_argument("--known", action="store_true", help="only check that the names are labs")
    parser.add_argument(
        "--system",
        action="store_true",
        help="only print what to start the system with for these labs (RELAY=…, and POSTGRES=ha or SHARE_GROUPS=on"
        " where they need it)",
    )
    args = parser.parse_args(argv)
    if not args.names:
        print("Labs (make lab NAME=<name>, or NAME=all):")
        for lab in LABS:
            needs = "" if lab.start == "make up" else f"  [{lab.start.removeprefix('make down && make up ')}]"
            print(f"  {lab.name:<24} {lab.title}  ({lab.doc}){needs}")
        return 0
    everything = args.names == ["all"]
    names = [lab.name for lab in LABS] if everything else args.names
    unknown = [name for name in names if name not in BY_NAME]
    if unknown:
        print(f"unknown lab(s): {', '.join(unknown)}; known: {', '.join(BY_NAME)}", file=sys.stderr)
        return 2
    if args.known:
        return 0
    if args.system:
        print(_system_for(names))
        return 0
    settings = Settings()
    url = args.panel or f"http://127.0.0.1:{settings.CHAOS_PANEL_PORT}"
    panel = PanelClient(url, args.token or settings.CHAOS_PANEL_TOKEN)
    try:
        if everything:
            names = _runnable(names, panel)
        results = [run(BY_NAME[name], panel) for name in names]
    except LabError as error:
        print(error, file=sys.stderr)
        return 2
    finally:
        panel.close()
    failed = [r.lab.name for r in results if not r.passed]
    print(
        f"{len(results) - len(failed)} of {len(results)} lab(s) passed"
        + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


def _relay_for(names: list[str]) -> str:
    """RELAY as the caller set it; else the one relay these labs need; else the built-in one."""
    needed = {BY_NAME[name].relay for name in names}
    settings = Settings()
    if "RELAY" in settings.model_fields_set:
        return settings.RELAY
    return needed.pop() if len(needed) == 1 else "builtin"


def _system_for(names: list[str]) -> str:
    """`RELAY=…`, with ` POSTGRES=ha` when one of these labs needs a primary and a standby (or the
    caller set it), and ` SHARE_GROUPS=on` when every one of them needs the share groups (or the
    caller set it). Debezium's labs run on one server (its logical slots do not follow a promotion)."""
    settings = Settings()
    pair = "POSTGRES" in settings.model_fields_set and settings.POSTGRES == "ha"
    shared = "SHARE_GROUPS" in settings.model_fields_set and settings.SHARE_GROUPS == "on"
    relay = _relay_for(names)
    system = f"RELAY={relay}"
    if relay == "builtin" and (pair or any(BY_NAME[name].postgres == "ha" for name in names)):
        system += " POSTGRES=ha"  # a pair runs every lab on the built-in relay
    if shared or all(BY_NAME[name].share_groups for name in names):
        system += " SHARE_GROUPS=on"
    return system


def _runnable(names: list[str], panel: PanelClient) -> list[str]:
    """Of `all`, the labs this system runs (its relay; a pair, or the share groups, where needed);
    the others are named, with how to run them."""
    running = panel.relay()
    try:
        panel.databases()
        pair = True
    except LabError:
        pair = False
    shared, _ = panel.share_groups()
    runnable = []
    for lab in (BY_NAME[name] for name in names):
        if lab.relay != running or (lab.postgres == "ha" and not pair) or (lab.share_groups and not shared):
            print(f"Lab {lab.number:02d} · {lab.title}: skipped, it needs {lab.system} ({lab.start})")
        else:
            runnable.append(lab.name)
    return runnable


if __name__ == "__main__":
    sys.exit(main())
