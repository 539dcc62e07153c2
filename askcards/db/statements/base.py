"""What every hand-written statement shares: the one quoting helper, a model's columns and the
values of a new row, and rows read by hand turned into model instances as the ORM would make them."""
from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from django.db import connections, models, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.base import DEFERRED


def quote(connection: BaseDatabaseWrapper, name: str) -> str:
    """A table or column name as this database wants it in a statement (the one quoting helper)."""
    return connection.ops.quote_name(name)


def column(field: models.Field[Any, Any]) -> str:
    """A concrete field's column name (Django calls a field concrete when it has one)."""
    if field.column is None:
        raise ValueError(f"{field} has no column of its own")
    return field.column


def concrete_field(model: type[models.Model], name: str) -> models.Field[Any, Any]:
    """``model``'s field of this name or attname that has a column of its own."""
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field) or field.column is None:
        raise ValueError(f"{model.__name__}.{name} has no column of its own")
    return field


def connection_for(model: type[models.Model]) -> BaseDatabaseWrapper:
    return connections[router.db_for_write(model)]


def db_datetime(connection: BaseDatabaseWrapper, value: datetime) -> Any:
    return connection.ops.adapt_datetimefield_value(value)


# ------------------------------------------------------------------------- append-only rows


@functools.lru_cache(maxsize=None)
def insert_fields(model: type[models.Model]) -> list[models.Field]:
    """The fields a new row of ``model`` gives values for (every concrete field but the primary
    key), in ``row_values``' order."""
    return [field for field in model._meta.concrete_fields if not field.primary_key]


def row_values(model: type[models.Model], connection: BaseDatabaseWrapper, **values: Any) -> tuple[list[str], list[Any]]:
    """The columns and database values of one new row of ``model``: what
    ``model.objects.create(**values)`` would store, defaults and each field's conversion included."""
    row = model(**values)  # the fields' defaults, as create() would fill them
    fields = insert_fields(model)
    params = [field.get_db_prep_save(field.pre_save(row, True), connection) for field in fields]
    return [column(field) for field in fields], params



# -------------------------------------------------------------------------------- hot reads
# Reads on the click path, written out: the ORM spent several times what the database took
# compiling each query and building its rows (bench_statements).
# Rows still come back as model instances, each value converted as the ORM converts what it reads.


@functools.lru_cache(maxsize=None)
def read_plan(model: type[models.Model], alias: str, names: tuple[str, ...]) -> tuple[tuple[int | None, ...], tuple[Any, ...]]:
    """For reading the fields ``names`` of ``model`` in that order: for each of the model's
    concrete fields, which value is its (None: not read, deferred), and per value the ORM's
    converters (backend's, then field's) with the column they belong to."""
    connection = connections[alias]
    fields = [concrete_field(model, name) for name in names]
    converters = []
    for field in fields:
        col = field.get_col(model._meta.db_table)
        converters.append((tuple(connection.ops.get_db_converters(col)) + tuple(col.get_db_converters(connection)), col))
    at = {field.attname: index for index, field in enumerate(fields)}
    return tuple(at.get(field.attname) for field in model._meta.concrete_fields), tuple(converters)


def instance(model: type[models.Model], connection: BaseDatabaseWrapper, names: tuple[str, ...], values: Any) -> Any:
    """A ``model`` instance from a statement's ``values`` for the fields ``names`` (the others
    deferred, as ``only()`` leaves them)."""
    order, converters = read_plan(model, connection.alias, names)
    converted = []
    for value, (functions, col) in zip(values, converters):
        for function in functions:
            value = function(value, col, connection)
        converted.append(value)
    # A value for every concrete field (DEFERRED where not read): from_db then ignores its names.
    return model.from_db(
        connection.alias, (), [DEFERRED if index is None else converted[index] for index in order]
    )


@functools.lru_cache(maxsize=None)
def field_names(model: type[models.Model]) -> tuple[str, ...]:
    return tuple(field.name for field in model._meta.concrete_fields)


def columns_of(connection: BaseDatabaseWrapper, model: type[models.Model], table: str) -> str:
    """Every concrete column of ``model`` as read from ``table`` (an alias), in field order."""
    return ", ".join(f"{table}.{quote(connection, column(field))}" for field in model._meta.concrete_fields)


def rows_of(connection: BaseDatabaseWrapper, row: Any, *models_: type[models.Model]) -> list[Any]:
    """One instance per model from a row that holds every concrete column of each, in turn."""
    instances, at = [], 0
    for model in models_:
        names = field_names(model)
        instances.append(instance(model, connection, names, row[at:at + len(names)]))
        at += len(names)
    return instances


def ask_and_session(connection: BaseDatabaseWrapper, *more: tuple[type[models.Model], str]) -> str:
    """``SELECT`` every column of an ask (``a``), its session (``s``) and each of ``more`` (a model
    and its alias, joined by the caller) ``FROM`` the ask joined to its session."""
    from askcards.models import Ask, Session

    q = functools.partial(quote, connection)
    tables: tuple[tuple[type[models.Model], str], ...] = ((Ask, "a"), (Session, "s"), *more)
    columns = [columns_of(connection, model, alias) for model, alias in tables]
    return (
        f"SELECT {', '.join(columns)} FROM {q(Ask._meta.db_table)} a "
        f"INNER JOIN {q(Session._meta.db_table)} s ON s.{q('id')} = a.{q('session_id')} "
    )



def keep_related(instance: models.Model, name: str, rows: list[Any]) -> None:
    """``rows`` as ``instance``'s related ``name`` (what ``prefetch_related`` leaves, where
    ``instance.<name>.all()`` looks first): rows read by hand, or just written, need no query."""
    instance.__dict__.setdefault("_prefetched_objects_cache", {})[name] = rows


