"""Database helpers shared by the async entry points (long-polls, platform callbacks) and the
transitions' hot path. Every hand-written statement is in ``askcards.db.statements``."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable

from asgiref.sync import sync_to_async
from django.db import close_old_connections

__all__ = ["in_executor", "in_pool"]


def in_pool(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Awaitable[Any]:
    """Run sync ORM code in the shared thread pool, not on a thread made for one request.

    Connections belong to the pool's few long-lived threads: ``close_old_connections`` around each
    call ends a connection when CONN_MAX_AGE says so (every call on PostgreSQL, which hands it back
    to the psycopg pool; SQLite keeps one open per thread, schema read once)."""

    return in_executor(None, fn, *args, **kwargs)


def in_executor(executor: ThreadPoolExecutor | None, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Awaitable[Any]:
    """``in_pool`` on threads of ``executor`` (None: the event loop's default pool)."""

    def call():
        close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return sync_to_async(call, thread_sensitive=False, executor=executor)()
