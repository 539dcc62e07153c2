"""How a server process's cyclic garbage collector runs, so that thousands of parked waiters do
not stall every answer now and then.

CPython's collector examines every tracked object of the oldest generation on a full collection,
with the whole process stopped. A parked waiter keeps a hundred or more such objects alive (its
task, coroutines, request objects, the server's for its connection), so a process holding
thousands pauses for hundreds of milliseconds on each full collection (measured on 2 cores at
10,000 waiters over two processes: 560–800 ms at 550,000–700,000 objects a process, every one
to two minutes, each holding up the wakes queued behind it: the scale-out benchmark's tail).
Most of those objects are not garbage and never will be by a cycle: a parked waiter is freed by
reference counting when it ends (``tests/mcp/test_exchange.py`` and the long-poll and panel
tests check that what a waiter held is in no cycle by then).

So:

- ``settle()``, at start-up (``project.asgi``, whatever server runs it): ``gc.freeze()`` the
  objects start-up made (modules, settings, URL patterns: about 180,000), which live as long as the
  process, and space out CPython's own full collections (``FULL_EVERY`` middle collections
  instead of 10).
- ``pace()``, in ``manage.py serve``'s event loop: CPython's automatic full collections are off;
  every ``FULL_SECONDS`` one full collection examines only what is not frozen (what survived since
  the last, a few tens of thousands of objects at most: tens of milliseconds), then freezes what
  survived it. What is frozen is freed as ever when its last reference goes; only a cycle made
  of objects frozen meanwhile is not found, and that is bounded: once the frozen objects are
  ``GROWTH`` times as many as right after the last collection of everything, the next collection
  examines everything (one long pause, as before, but only when the process's memory could have
  doubled from such cycles: rarely, when waiters let go of what they held).
"""
from __future__ import annotations

import asyncio
import gc
import logging
import time
from types import ModuleType
from typing import Any

logger = logging.getLogger(__name__)

FULL_EVERY = 100  # settle(): a full collection at most every this many middle ones (CPython: 10)
FULL_SECONDS = 10.0  # pace(): a full collection of what is not frozen this often
CHECK_EVERY = 6  # pace(): the frozen objects are counted (a walk over them all) every this many
GROWTH = 2.0  # ... and collected all once they are this many times as many as after the last time
FLOOR = 200_000  # ... but not below this many: a small process's whole collections are cheap anyway
OFF = 1 << 30  # a threshold no count reaches: CPython's own full collections never run


def settle() -> None:
    """Freeze what start-up made and space out full collections (see the module docstring)."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_EVERY)


class Pacer:
    """``pace()``'s state: full collections of what is young, freezing what survives, and of
    everything once the frozen part has grown ``GROWTH`` times (see the module docstring)."""

    def __init__(self, collector: Any = gc, clock=time.perf_counter) -> None:
        self.gc: ModuleType | Any = collector
        self.clock = clock
        self.ticks = 0
        self.baseline = 0  # frozen objects right after the last collection of everything

    def take_over(self) -> None:
        young, middle, _ = self.gc.get_threshold()
        self.gc.set_threshold(young, middle, OFF)
        self.gc.collect()
        self.gc.freeze()
        self.baseline = self.gc.get_freeze_count()

    def tick(self) -> None:
        self.ticks += 1
        if self.ticks % CHECK_EVERY == 0:
            frozen = self.gc.get_freeze_count()
            if frozen > GROWTH * max(self.baseline, FLOOR):
                began, before = self.clock(), self.baseline
                self.gc.unfreeze()
                found = self.gc.collect()
                self.gc.freeze()
                self.baseline = self.gc.get_freeze_count()
                logger.info("full collection of everything: %d frozen objects (%d after the last), %d unreachable "
                            "freed, %d kept, in %.0f ms", frozen, before, found, self.baseline,
                            1000 * (self.clock() - began))
                return
        self.gc.collect()
        self.gc.freeze()


async def pace(seconds: float = FULL_SECONDS, pacer: Pacer | None = None) -> None:
    """Run the process's full collections from here on (``manage.py serve``): see the module
    docstring. Runs until cancelled."""
    pacer = pacer or Pacer()
    pacer.take_over()
    while True:
        await asyncio.sleep(seconds)
        pacer.tick()
