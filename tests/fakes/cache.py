"""A Django cache backend that can go down the way a Redis server does: while ``FlakyCache.down``
is set, every call raises ``ConnectionError`` (what django-redis and Django's RedisCache raise when
the server is gone); otherwise it is an ordinary in-process cache.

    settings.CACHES = {"default": {"BACKEND": "tests.fakes.cache.FlakyCache", "LOCATION": "x"}}

``silent_server()``: a Redis that has stopped answering (hung, or behind a dead link): it accepts
connections on 127.0.0.1 and never replies.
"""
from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

from django.core.cache.backends.locmem import LocMemCache


class FlakyCache(LocMemCache):
    # One switch for every instance: Django makes a cache object per thread.
    down = False
    calls_refused = 0

    def _answer(self) -> None:
        if FlakyCache.down:
            FlakyCache.calls_refused += 1
            raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    def get(self, *args: Any, **kwargs: Any) -> Any:
        self._answer()
        return super().get(*args, **kwargs)

    def set(self, *args: Any, **kwargs: Any) -> None:
        self._answer()
        super().set(*args, **kwargs)

    def add(self, *args: Any, **kwargs: Any) -> bool:
        self._answer()
        return super().add(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> bool:
        self._answer()
        return super().delete(*args, **kwargs)

    def touch(self, *args: Any, **kwargs: Any) -> bool:
        self._answer()
        return super().touch(*args, **kwargs)

    def has_key(self, *args: Any, **kwargs: Any) -> bool:
        self._answer()
        return super().has_key(*args, **kwargs)

    def incr(self, *args: Any, **kwargs: Any) -> int:
        self._answer()
        return super().incr(*args, **kwargs)

    def clear(self) -> None:
        self._answer()
        super().clear()


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections and never answers; closed on exit."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set() and len(held) < 100:
            try:
                held.append(listener.accept()[0])
            except OSError:  # the timeout, or closed
                continue

    thread = threading.Thread(target=accept, name="silent-redis", daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(2)
        listener.close()
        for connection in held:
            connection.close()
