"""Database helpers shared by the async entry points (long-polls, platform callbacks) and the
transitions' hot path. Every hand-written statement is in ``askcards.db.statements``."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Awaitable, Callable

from asgiref.sync import sync_to_async
from django.db import DEFAULT_DB_ALIAS, close_old_connections, connections

__all__ = ["in_pool", "planned_with_values"]


def in_pool(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Awaitable[Any]:
    """Run sync ORM code in the shared thread pool, not on a thread made for one request.

    Connections belong to the pool's few long-lived threads: ``close_old_connections`` around each
    call ends a connection when CONN_MAX_AGE says so (every call on PostgreSQL, which hands it back
    to the psycopg pool; SQLite keeps one open per thread, schema read once)."""

    def call():
        close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return sync_to_async(call, thread_sensitive=False)()


@contextlib.contextmanager
def planned_with_values(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """Statements run in the block are planned for their parameters' values, every time.

    With prepared statements on (``ASKCARDS_DB_PREPARE``, PostgreSQL), psycopg prepares a statement
    once a connection has run it 5 times, and PostgreSQL may then keep one generic plan for any
    values. That is the point for the hot paths' statements, but wrong for one whose best plan
    depends on a value: ``GET /asks?status=`` must take the status index for a rare status and
    walk the newest asks for a common one, while the generic plan walks the agent's whole history
    for a status it has no rows of. In the block psycopg prepares nothing (its
    ``prepare_threshold`` is None, then restored): each statement goes as an unnamed one, which
    PostgreSQL plans for the values bound to it. No extra round trip; elsewhere a no-op."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        yield
        return
    connection.ensure_connection()
    driver = connection.connection
    threshold = getattr(driver, "prepare_threshold", None)
    if threshold is None:  # not preparing anyway
        yield
        return
    driver.prepare_threshold = None
    try:
        yield
    finally:
        driver.prepare_threshold = threshold
