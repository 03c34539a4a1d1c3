"""A test that hangs where pytest-timeout cannot stop it ends the run, with every thread's stack.

pytest-timeout (method `signal`) fails a test that runs past its timeout by raising in the main
thread. It cannot when that thread is blocked in C code that never returns to Python, nor a second
time when the teardown of a test it stopped hangs too. The run would then hang until CI killed it,
saying nothing of where.

So each test's timeout also arms this guard, `GRACE_SECONDS` later: if the test is still running
then, the guard writes which test it is and every thread's stack to the terminal and ends the
process with `EXIT_STATUS`. The end of the session gets the same once pytest is done (a thread a
test started and never ended keeps the interpreter from exiting; a Kafka client's destructor can
hang there too). The guard is a Python thread, and faulthandler's own watchdog (which needs no
GIL) backs it up a minute later.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
from typing import Any

import pytest

GRACE_SECONDS = float(os.environ.get("EO_HANG_GRACE_SECONDS", "120"))
EXIT_STATUS = 3
BACKSTOP_SECONDS = 60.0

_terminal: int | None = None
_armed: threading.Timer | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _terminal
    # Output capture is suspended while plugins configure: this is the terminal's stderr, which
    # stays where it is while a test's own output is captured.
    _terminal = os.dup(sys.stderr.fileno())


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> None:
    _arm(f"{item.nodeid} still runs {GRACE_SECONDS:.0f} s past its timeout", settings.timeout + GRACE_SECONDS)
    # None: pytest-timeout's own timer is still set.


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> None:
    _disarm()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    _arm(f"the test process has not exited {GRACE_SECONDS:.0f} s after its last test", GRACE_SECONDS)


def _arm(what: str, seconds: float) -> None:
    global _armed
    _disarm()
    _armed = threading.Timer(seconds, _end, args=(what,))
    _armed.daemon = True
    _armed.start()
    if _terminal is not None:
        faulthandler.dump_traceback_later(seconds + BACKSTOP_SECONDS, exit=True, file=_terminal)


def _disarm() -> None:
    if _armed is not None:
        _armed.cancel()
    faulthandler.cancel_dump_traceback_later()


def _end(what: str) -> None:
    terminal = _terminal if _terminal is not None else 2
    names = "".join(f"  {thread.ident:#018x} {thread.name}\n" for thread in threading.enumerate())
    os.write(terminal, f"\nHANG: {what}; the threads:\n{names}their stacks, most recent call first:\n".encode())
    faulthandler.dump_traceback(file=terminal, all_threads=True)
    os.write(terminal, f"HANG: the run ends here with exit status {EXIT_STATUS}\n".encode())
    os._exit(EXIT_STATUS)
