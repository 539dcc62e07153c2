"""How a server process's cyclic garbage collector runs, so that thousands of parked waiters do
not stall every answer now and then.

CPython's collector examines every tracked object of the oldest generation on a full collection,
with the whole process stopped. A parked waiter keeps a few hundred such objects alive (its
tasks, coroutines, contexts, request objects: about 240 measured on a server holding 1,300
waiters), so a process holding thousands pauses for hundreds of milliseconds on each full
collection, and with the default thresholds it made one every 5–25 s while waiters came and
went (measured on 2 cores: 200–570 ms at 3,000 waiters across two processes; the wakes queued
behind them made the long tail of the scale-out benchmark).

Two changes, made once the process has started (``settle``):

- ``gc.freeze()``: the objects of start-up (modules, settings, URL patterns, about 180,000 of
  them) live as long as the process, so no collection examines them again.
- A full collection at most once every ``FULL_EVERY`` collections of the middle generation
  (CPython's default: 10), still only when the old generation grew by a quarter since the last:
  10× fewer full pauses. Cyclic garbage that reached the old generation is freed that much later:
  a few megabytes more between full collections at 3,000 waiters.

The young generations keep CPython's thresholds: most objects a request makes die there, and a
larger first generation only made each of its collections longer (measured: 40–110 ms each at
50,000). At 10,000 waiters over two processes a full collection still takes 0.4–1.6 s, now every
40–60 s instead of every few seconds: fewer objects per parked waiter is what shortens it
(bench_scaleout).
"""
from __future__ import annotations

import gc

FULL_EVERY = 100


def settle() -> None:
    """Freeze what start-up made and space out full collections (see the module docstring)."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_EVERY)
