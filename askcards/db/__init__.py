"""Database helpers shared by the async entry points (long-polls, platform callbacks) and the
transitions' hot path."""
from __future__ import annotations

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


_insert_sql: dict[tuple[type[models.Model], str], tuple[str, list[models.Field]]] = {}


def append_row(model: type[models.Model], **values: Any) -> None:
    """INSERT one row of an append-only table (audit and outbox rows), without reading it back.

    What ``Model.objects.create`` would store — defaults and each field's conversion come from the
    model — but the statement is built once per model and database instead of by the ORM's
    compiler on every call: every answer appends two such rows inside its transaction."""
    row = model(**values)  # the fields' defaults, as create() would fill them
    connection = connections[router.db_for_write(model)]
    built = _insert_sql.get((model, connection.alias))
    if built is None:
        fields = [field for field in model._meta.concrete_fields if not field.primary_key]
        quote = connection.ops.quote_name
        sql = "INSERT INTO {} ({}) VALUES ({})".format(
            quote(model._meta.db_table),
            ", ".join(quote(field.column) for field in fields),
            ", ".join(["%s"] * len(fields)),
        )
        built = _insert_sql[(model, connection.alias)] = (sql, fields)
    sql, fields = built
    params = [field.get_db_prep_save(field.pre_save(row, True), connection) for field in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
