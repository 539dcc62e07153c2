"""What each database does its own way: a row estimate, the seconds between two datetimes, a
commit that does not wait for the disk."""
from __future__ import annotations

from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

from .base import connection_for, quote


def table_row_estimate(model: type[models.Model]) -> int | None:
    """PostgreSQL's estimate of the rows in ``model``'s table (``pg_class.reltuples``, kept by
    VACUUM / ANALYZE / autovacuum), read in well under a millisecond at any size; None on another
    database or when the table was never analysed. For the admin's counts (``selectors.
    changelist_count``): an exact ``COUNT(*)`` reads the whole table."""
    connection = connection_for(model)
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        # to_regclass: the table's name as the catalogue knows it (quoted as in a statement).
        cursor.execute(
            "SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)", [quote(connection, model._meta.db_table)]
        )
        row = cursor.fetchone()
    if row is None or row[0] is None or row[0] < 0:
        return None
    return int(row[0])



class SecondsBetween(models.Func):
    """Seconds from ``earlier`` to ``later`` (two datetime expressions) as a float, computed by
    the database itself, for the operator dashboard's time-to-answer percentiles
    (``askcards.operators.dashboard``), which sort every answer of the window by it, and the answer-time
    histogram of ``/metrics`` (``selectors.metrics_answer_times``).

    The ORM's own ``F(later) - F(earlier)`` calls a Python function per row on SQLite (Django's
    ``django_timestamp_diff``); SQLite's ``julianday`` and PostgreSQL's ``EXTRACT(EPOCH …)`` are
    native. SQLite's julianday resolves about 50 µs, plenty for answer times."""

    arity = 2
    output_field = models.FloatField()

    def __init__(self, later: Any, earlier: Any) -> None:
        super().__init__(later, earlier)

    def as_sqlite(self, compiler: Any, connection: BaseDatabaseWrapper, **extra: Any) -> Any:
        return self.as_sql(
            compiler, connection, template="((julianday(%(expressions)s)) * 86400.0)", arg_joiner=") - julianday(",
            **extra,
        )

    def as_postgresql(self, compiler: Any, connection: BaseDatabaseWrapper, **extra: Any) -> Any:
        return self.as_sql(
            compiler, connection, template="CAST(EXTRACT(EPOCH FROM (%(expressions)s)) AS double precision)",
            arg_joiner=" - ", **extra,
        )

    def as_sql(
        self, compiler: Any, connection: BaseDatabaseWrapper, function: str | None = None, template: str | None = None,
        arg_joiner: str | None = None, **extra_context: Any,
    ) -> Any:
        if template is None:
            raise NotImplementedError(f"SecondsBetween has no statement for {connection.vendor}")
        return super().as_sql(compiler, connection, function, template, arg_joiner, **extra_context)


def commit_without_flush_wait(model: type[models.Model]) -> None:
    """Inside a transaction on PostgreSQL: its COMMIT returns before the WAL reaches the disk
    (``SET LOCAL synchronous_commit TO OFF``). For soft state only — panel presence, rewritten
    every 30 s and trusted for 90 s: a database crash loses at most the last moment of heartbeats.
    With many sockets on a PostgreSQL whose disk was busy, each presence UPDATE's own flush kept the
    panel sockets' database threads waiting (bench_scaleout). Elsewhere a no-op."""
    connection = connection_for(model)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")
