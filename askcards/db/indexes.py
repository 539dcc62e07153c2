"""Index shapes that must differ between the databases (the models name them; migrations build them)."""
from __future__ import annotations

from typing import Any

from django.db import models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.backends.ddl_references import Statement


class OpenAsksIndex(models.Index):
    """The open asks by one column, for the worker's sweeps (deadlines, lapsed waiters) every tick:
    a partial index on PostgreSQL, ``(status, column)`` over every ask on SQLite.

    SQLite uses a partial index only when the query spells out its condition, and the ORM binds
    ``status IN (%s, %s)`` as parameters, so the partial index never served a sweep there. Without
    statistics (nothing runs ANALYZE) SQLite then took ``ask_status_created_idx`` for the status
    and read every open ask on every tick (two sweeps a tick, twice a second). Led by ``status``, this index has that equality and the column's range behind it,
    and wins; it reads the due entries only. PostgreSQL plans with the values and statistics, and
    keeps the column alone (the sweep's ``ORDER BY column LIMIT`` in index order)."""

    def create_sql(self, model: type[models.Model], schema_editor: BaseDatabaseSchemaEditor, using: str = "",
                   **kwargs: Any) -> Statement:
        if schema_editor.connection.vendor != "sqlite":
            return super().create_sql(model, schema_editor, using, **kwargs)
        _, args, options = self.deconstruct()
        options["fields"] = ["status", *options["fields"]]
        options.pop("condition", None)
        return models.Index(*args, **options).create_sql(model, schema_editor, using, **kwargs)
