"""What a parked waiter held, left in reference cycles once it ends.

A server freezes what has lived a while (askcards/runtime/collector.py): a waiter's objects are frozen by
the time it ends, so they must be freed by reference counting then. A cycle among them is only
found at the rare collection of everything, and holds its memory till then.
"""
from __future__ import annotations

import gc

# Whose objects count: the server's code and what it runs on (not the tests' own clients).
SERVER_MODULES = ("askcards", "mcp", "asyncio", "starlette", "channels", "daphne", "django", "rest_framework")


def made_by(obj: object) -> str:
    """The module that made ``obj``: a function's own, else its type's."""
    module = getattr(obj, "__module__", None) if callable(obj) and not isinstance(obj, type) else None
    return module if isinstance(module, str) else (type(obj).__module__ or "")


class Cycles:
    """``mark()`` while the waiter is parked; ``left()`` once it has ended: the server's objects
    alive at the mark that are now garbage in a cycle (module: qualified name, sorted)."""

    def __init__(self) -> None:
        self._alive: set[int] = set()

    def mark(self) -> None:
        gc.collect()
        self._alive = {id(o) for o in gc.get_objects()}

    def left(self) -> list[str]:
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            gc.collect()
            left = [o for o in gc.garbage if id(o) in self._alive]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
        return sorted({f"{made_by(o)}: {getattr(o, '__qualname__', type(o).__qualname__)}"
                       for o in left if made_by(o).startswith(SERVER_MODULES)})
