"""The workshop's side of a consumer process, plugged into the runtime from outside it.

Teaching strategies (`teaching.py`: each one mistake the pattern warns against), the lab
controls a member serves between its polls (`controls.py`: rewind, hold, horizon, the
ack-before-commit mistake) and where a run-time strategy switch is stored (`strategy_store.py`).
A workshop process passes both pieces to the runtime:

    wiring.run(name, topics, handlers, paths=lab.PATHS, attach=lab.attach)

A production process passes neither, and the consumer package imports nothing from here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from functools import partial

import psycopg

from ..consumer.loop import ConsumerLoop
from ..consumer.processor import PATHS as CORRECT_ONLY
from ..consumer.processor import MessageProcessor, Path
from ..consumer.wiring import ConsumerSettings, Member, MemberHooks
from ..outcomes import Strategy
from ..telemetry import Telemetry
from . import strategy_store
from .controls import LabControls, LabProcess
from .teaching import with_teaching_paths

log = logging.getLogger(__name__)

PATHS = with_teaching_paths(CORRECT_ONLY)
"""The correct path and every teaching path: what a workshop process may switch between."""


class LabAttachment:
    """One consumer process's lab: a `LabControls` per member, and the control endpoint's runtime."""

    def __init__(
        self,
        consumer_name: str,
        settings: ConsumerSettings,
        telemetry: Telemetry,
        paths: Mapping[Strategy, Callable[[], Path]] = PATHS,
    ) -> None:
        self.consumer_name, self.settings, self.telemetry = consumer_name, settings, telemetry
        self.paths = dict(paths)
        """The paths the process was given: what a switch may choose."""

    def starting_strategy(self, configured: Strategy) -> Strategy:
        """The strategy stored by a run-time switch, else `configured` (also when the store cannot be read)."""
        try:
            with psycopg.connect(self.settings.DATABASE_URL, connect_timeout=5, autocommit=True) as connection:
                return strategy_store.load(connection, self.consumer_name) or configured
        except psycopg.Error as error:
            log.warning("could not read the stored strategy (%s); starting with %s", error, configured.value)
            return configured

    def member(self) -> LabControls:
        """A new member's controls."""
        return LabControls(self.consumer_name, self.telemetry)

    def runtime(self, members: Sequence[tuple[Member, MemberHooks]]) -> LabProcess:
        """The members as the control endpoint serves them (strategy, rewind, hold, horizon);
        each member's controls read its strategy from its processor from now on."""
        controls = [(loop, hooks) for loop, hooks in members if isinstance(hooks, LabControls)]
        for loop, hooks in controls:
            hooks.strategy_of = partial(_strategy_of, loop.processor)
            if isinstance(loop, ConsumerLoop):
                hooks.joining = loop.still_joining
        configured = timedelta(days=self.settings.DEDUP_HORIZON_DAYS)
        return LabProcess(
            self.consumer_name, controls, self.settings.DATABASE_URL, self.telemetry, configured, self.paths
        )


def _strategy_of(processor: MessageProcessor) -> Strategy:
    return processor.config.strategy


def attach(
    consumer_name: str,
    settings: ConsumerSettings,
    telemetry: Telemetry,
    paths: Mapping[Strategy, Callable[[], Path]] = PATHS,
) -> LabAttachment:
    """The lab of one consumer process: what `wiring.run(attach=...)` takes."""
    return LabAttachment(consumer_name, settings, telemetry, paths)
