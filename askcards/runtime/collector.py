"""How a server process's cyclic garbage collector runs, so that thousands of parked waiters do
not stall every answer now and then.

CPython's collector examines every tracked object of the oldest generation on a full collection,
with the whole process stopped. A parked waiter keeps a hundred or more such objects alive (its
task, coroutines, request objects, the server's for its connection), so a process holding
thousands paused long on each full collection, and full collections came often, each pause
holding up the wakes queued behind it (the scale-out benchmark's tail). Yet
nearly all of those objects are no cycle's garbage: a parked waiter is freed by reference
counting when it ends (the long-poll, MCP and panel tests check that what a waiter held is in no
cycle by then, ``tests/cycles.py``).

So ``settle()``, once start-up is over (``project.asgi``, under whichever server runs it):

- freezes (``gc.freeze()``) what start-up made (modules, settings, URL patterns), which lives
  as long as the process;
- turns CPython's own full collections off and makes one every ``PACE_SECONDS`` from a thread of its
  own, which examines only what is not frozen (what survived since the last: far fewer objects, a
  far shorter pause) and then freezes what survived it. A frozen object is still freed the moment
  its last reference goes; only a cycle among frozen objects is not found. That is bounded: once the
  process's resident memory is ``GROWTH`` times what it was right after the last collection of
  everything, the next collection examines everything (one long pause, as every full collection was
  before, but only when memory has doubled: more waiters, or such cycles). Memory is read from
  ``/proc/self/statm``, next to nothing; counting the frozen objects instead
  (``gc.get_freeze_count()``) walks them all, as long as a collection of them.

The young generations keep CPython's thresholds: most objects a request makes die there.
``PACE_SECONDS = 0`` (the test suite's own process) keeps CPython's full collections, spaced
out to one every ``FULL_EVERY`` collections of the middle generation.
"""
from __future__ import annotations

import gc
import logging
import os
import threading
import time
from typing import Any

logger = logging.getLogger(__name__)

PACE_SECONDS = 2.0  # a full collection of what is not frozen this often (0: CPython's own, spaced out)
FULL_EVERY = 100  # without pacing: a full collection at most every this many middle ones (CPython: 10)
GROWTH = 2.0  # everything is collected once resident memory is this many times what it was after the last time
FLOOR = 128 << 20  # ... though never below this many bytes: an idle server holds about as much
OFF = 1 << 30  # a threshold no count reaches: CPython's own full collections never run
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes() -> int:
    """This process's resident memory now (its peak where ``/proc`` is missing)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

_settled = False


def settle() -> None:
    """Freeze what start-up made and pace full collections (see the module docstring). Once per
    process; a second call changes nothing."""
    global _settled
    if _settled:
        return
    _settled = True
    if not PACE_SECONDS:
        gc.collect()
        gc.freeze()
        young, middle, _ = gc.get_threshold()
        gc.set_threshold(young, middle, FULL_EVERY)
        return
    pacer = Pacer()
    pacer.take_over()
    threading.Thread(target=_pace, args=(pacer, PACE_SECONDS), name="askcards-collector", daemon=True).start()


def _pace(pacer: Pacer, seconds: float) -> None:
    while True:
        time.sleep(seconds)
        try:
            pacer.tick()
        except Exception:  # never seen; the next tick tries again
            logger.exception("a paced full collection failed")


class Pacer:
    """Full collections of what is not frozen, freezing what survives; of everything once resident
    memory has grown ``GROWTH`` times (see the module docstring)."""

    def __init__(self, collector: Any = gc, resident=resident_bytes, clock=time.perf_counter) -> None:
        self.gc = collector
        self.resident = resident
        self.clock = clock
        self.baseline = 0  # resident bytes right after the last collection of everything

    def take_over(self) -> None:
        """CPython's own full collections off; everything alive now frozen."""
        young, middle, _ = self.gc.get_threshold()
        self.gc.set_threshold(young, middle, OFF)
        self.gc.collect()
        self.gc.freeze()
        self.baseline = self.resident()

    def tick(self) -> None:
        """One paced full collection: of everything, unfrozen first, once memory has grown."""
        resident = self.resident()
        everything = resident > GROWTH * max(self.baseline, FLOOR)
        began, before = self.clock(), self.baseline
        if everything:
            self.gc.unfreeze()
        freed = self.gc.collect()
        self.gc.freeze()
        if everything:
            self.baseline = self.resident()
            logger.info("full collection of everything, resident memory %.0f MB (%.0f MB after the last): %d "
                        "unreachable objects freed in %.0f ms", resident / 2**20, before / 2**20, freed,
                        1000 * (self.clock() - began))
