"""A Django cache backend that can go down the way a Redis server does: while ``FlakyCache.down``
is set, every call raises ``ConnectionError`` (what django-redis and Django's RedisCache raise when
the server is gone); otherwise it is an ordinary in-process cache.

    settings.CACHES = {"default": {"BACKEND": "tests.fakes.cache.FlakyCache", "LOCATION": "x"}}
"""
from __future__ import annotations

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
