"""Database helpers shared by the async entry points (long-polls, platform callbacks) and the
transitions' hot path."""
from __future__ import annotations

import functools
from typing import Any, Awaitable, Callable

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connections, models, router


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


def row_values(model: type[models.Model], connection, **values: Any) -> tuple[list[str], list[Any]]:
    """The columns and database values of one new row of ``model`` (every concrete field but the
    primary key): what ``Model.objects.create(**values)`` would store, defaults and each field's
    conversion included, for an INSERT written out on a hot path."""
    row = model(**values)  # the fields' defaults, as create() would fill them
    fields = insert_fields(model)
    params = [field.get_db_prep_save(field.pre_save(row, True), connection) for field in fields]
    return [field.column for field in fields], params


@functools.lru_cache(maxsize=None)
def insert_fields(model: type[models.Model]) -> list[models.Field]:
    """The fields a new row of ``model`` gives values for, in ``row_values``' order."""
    return [field for field in model._meta.concrete_fields if not field.primary_key]


def append_row(model: type[models.Model], **values: Any) -> None:
    """INSERT one row of an append-only table (audit and outbox rows), without reading it back.

    The statement is built once per model and database instead of by the ORM's compiler on every
    call: every answer appends such rows inside its transaction."""
    connection = connections[router.db_for_write(model)]
    _, params = row_values(model, connection, **values)
    with connection.cursor() as cursor:
        cursor.execute(_insert_sql(model, connection.alias), params)


@functools.lru_cache(maxsize=None)
def _insert_sql(model: type[models.Model], alias: str) -> str:
    quote = connections[alias].ops.quote_name
    columns = [field.column for field in insert_fields(model)]
    return "INSERT INTO {} ({}) VALUES ({})".format(
        quote(model._meta.db_table), ", ".join(quote(column) for column in columns), ", ".join(["%s"] * len(columns))
    )
