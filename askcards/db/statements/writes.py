"""The hot writes, written out: a callback's receipt, an ask's ending, an agent event, a card
message's claim and a progress card's mark."""
from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from django.db import connections, models
from django.db.backends.base.base import BaseDatabaseWrapper

from .base import column, concrete_field, connection_for, db_datetime, insert_fields, quote, row_values

# ------------------------------------------------------------------------- callback receipts


def callback_receipt_insert(*, platform: str, event_id: str, created_at: datetime) -> bool:
    """Record a callback's (platform, event id); False when that pair is recorded already.

    ``INSERT … ON CONFLICT DO NOTHING`` (PostgreSQL and SQLite): a duplicate changes nothing and
    leaves the caller's transaction usable without a savepoint, and a concurrent duplicate waits
    for the first one's transaction, then inserts nothing if it committed."""
    from askcards.models import CallbackReceipt

    connection = connection_for(CallbackReceipt)
    with connection.cursor() as cursor:
        cursor.execute(_receipt_sql(connection.alias), [platform, event_id, db_datetime(connection, created_at)])
        return cursor.rowcount == 1


@functools.lru_cache(maxsize=None)
def _receipt_sql(alias: str) -> str:
    from askcards.models import CallbackReceipt

    connection = connections[alias]
    platform, event_id = quote(connection, "platform"), quote(connection, "event_id")
    return (
        f"INSERT INTO {quote(connection, CallbackReceipt._meta.db_table)} ({platform}, {event_id}, "
        f"{quote(connection, 'created_at')}) VALUES (%s, %s, %s) ON CONFLICT ({platform}, {event_id}) DO NOTHING"
    )


# ------------------------------------------------------------------------------ ask endings


def ask_close(
    pk: str,
    *,
    from_status: str,
    changes: dict[str, Any],
    respondent: tuple[str, dict[str, Any]] | None,
    missing: bool,
    audit: dict[str, Any],
) -> bool:
    """The terminal transition's writes: the ask's row moves from ``from_status`` with
    ``changes`` (status, reason, closed_at, result); if it did, the answering ``respondent``
    (its respondent_key and the row's new values) and, when ``missing``, every other pending
    respondent (to missing) change too, and the ``audit`` row (an ``AskEvent``'s values but the
    ask) is added. False, with nothing written, when the ask was not in ``from_status``.

    PostgreSQL: one statement (data-modifying ``WITH`` parts, each gated on the ask's update),
    where the ORM made three to five round trips inside every answer's transaction. SQLite, which
    allows no UPDATE inside WITH: the same writes as a statement each, the later ones only when
    the ask's update found its row (written out too: the ORM's compiling was most of their cost,
    on every answer of the embedded default; bench_longpoll, bench_feishu_callback)."""
    from askcards.models import Ask, AskEvent, Respondent

    connection = connection_for(Ask)
    ask_params = [concrete_field(Ask, name).get_db_prep_save(value, connection) for name, value in changes.items()]
    ask_params += [pk, from_status]
    answered_params: list[Any] = []
    if respondent is not None:
        key, new_values = respondent
        answered_params = [
            concrete_field(Respondent, name).get_db_prep_save(value, connection) for name, value in new_values.items()
        ]
        answered_params += [key, Respondent.Status.PENDING]
    missing_params = [Respondent.Status.MISSING, Respondent.Status.PENDING, respondent[0] if respondent else ""]
    columns, audit_values = row_values(AskEvent, connection, ask_id=pk, **audit)
    shape = (connection.alias, tuple(changes), tuple(respondent[1]) if respondent is not None else None, missing)
    if connection.vendor != "postgresql":
        ask_sql, answered_sql, missing_sql, audit_sql = _ask_close_steps_sql(*shape)
        with connection.cursor() as cursor:
            cursor.execute(ask_sql, ask_params)
            if cursor.rowcount != 1:
                return False
            if answered_sql:
                cursor.execute(answered_sql, [*answered_params, pk])
            if missing_sql:
                cursor.execute(missing_sql, [*missing_params, pk])
            cursor.execute(audit_sql, audit_values)
        return True
    del audit_values[columns.index("ask_id")]  # the updated row's id takes its place
    params = ask_params + answered_params + (missing_params if missing else [])
    with connection.cursor() as cursor:
        cursor.execute(_ask_close_sql(*shape), params + audit_values)
        return cursor.fetchone()[0] == 1


def _close_updates(connection: BaseDatabaseWrapper, changes: tuple[str, ...], respondent: tuple[str, ...] | None,
                   missing: bool, of_ask: str) -> tuple[str, str, str]:
    """``ask_close``'s three UPDATEs, as both databases run them: the ask's (``changes``, then
    its id and status), the answering respondent's (its ``respondent`` values, then its key and
    status; "" when none) and the other pending respondents' to missing (status, status, key; ""
    unless ``missing``). A respondent row belongs to the ask by ``ask_id {of_ask}``, last."""
    from askcards.models import Ask, Respondent

    q = functools.partial(quote, connection)

    def assignments(model: type[models.Model], names: tuple[str, ...]) -> str:
        return ", ".join(f"{q(column(concrete_field(model, name)))} = %s" for name in names)

    respondent_table = q(Respondent._meta.db_table)
    ask_sql = (f"UPDATE {q(Ask._meta.db_table)} SET {assignments(Ask, changes)} "
               f"WHERE {q('id')} = %s AND {q('status')} = %s")
    answered_sql = missing_sql = ""
    if respondent is not None:
        answered_sql = (f"UPDATE {respondent_table} SET {assignments(Respondent, respondent)} "
                        f"WHERE {q('respondent_key')} = %s AND {q('status')} = %s AND {q('ask_id')} {of_ask}")
    # Two parts of PostgreSQL's one statement must not update one row (each sees the rows as they
    # were before it): the pending respondents that go missing leave out the one who answered.
    if missing:
        missing_sql = (f"UPDATE {respondent_table} SET {q('status')} = %s "
                       f"WHERE {q('status')} = %s AND {q('respondent_key')} <> %s AND {q('ask_id')} {of_ask}")
    return ask_sql, answered_sql, missing_sql


@functools.lru_cache(maxsize=None)
def _ask_close_steps_sql(alias: str, changes: tuple[str, ...], respondent: tuple[str, ...] | None,
                         missing: bool) -> tuple[str, str, str, str]:
    """SQLite: ``ask_close``'s statements one by one, the three UPDATEs (the respondents' taking
    the ask's id last) and the audit row's INSERT."""
    from askcards.models import AskEvent

    connection = connections[alias]
    q = functools.partial(quote, connection)
    fields = insert_fields(AskEvent)
    audit_sql = (
        f"INSERT INTO {q(AskEvent._meta.db_table)} ({', '.join(q(column(field)) for field in fields)}) "
        f"VALUES ({', '.join(['%s'] * len(fields))})"
    )
    return (*_close_updates(connection, changes, respondent, missing, "= %s"), audit_sql)


@functools.lru_cache(maxsize=None)
def _ask_close_sql(alias: str, changes: tuple[str, ...], respondent: tuple[str, ...] | None, missing: bool) -> str:
    """PostgreSQL: ``ask_close`` as one statement, each part gated on the ask's update (``won``)."""
    from askcards.models import AskEvent

    connection = connections[alias]
    q = functools.partial(quote, connection)
    ask_sql, answered_sql, missing_sql = _close_updates(
        connection, changes, respondent, missing, f"IN (SELECT {q('id')} FROM won)")
    parts = [f"won AS ({ask_sql} RETURNING {q('id')})"]
    if answered_sql:
        parts.append(f"answered AS ({answered_sql})")
    if missing_sql:
        parts.append(f"missing AS ({missing_sql})")
    fields = insert_fields(AskEvent)
    values = [
        f"won.{q('id')}" if field.name == "ask" else f"CAST(%s AS {field.cast_db_type(connection)})" for field in fields
    ]
    parts.append(
        f"audit AS (INSERT INTO {q(AskEvent._meta.db_table)} ({', '.join(q(column(field)) for field in fields)}) "
        f"SELECT {', '.join(values)} FROM won)"
    )
    return f"WITH {', '.join(parts)} SELECT COUNT(*) FROM won"


# ------------------------------------------------------------------------------- the outbox


def outbox_event_insert(*, agent_id: int, **values: Any) -> None:
    """Bump the agent's ``event_seq`` and insert an ``OutboxEvent`` with the new number as its
    ``seq``; the event keeps ``next_attempt_at`` only when the agent has a webhook URL. ``values``
    are the event's other fields, as for ``OutboxEvent.objects.create`` (``seq`` is ignored).

    The agent's row stays locked until the caller's transaction ends. Raises
    ``Agent.DoesNotExist`` when there is no such agent."""
    from askcards.models import Agent, OutboxEvent

    connection = connection_for(OutboxEvent)
    values = {**values, "agent_id": agent_id, "seq": 0}
    if connection.vendor == "postgresql":
        # One statement bumps the counter and inserts the event: no round trip (and, under load,
        # no wait for the GIL) while this transaction holds the agent's row, which every answer to
        # the agent's asks needs. Split into the bump and the ORM's INSERT, concurrent Feishu
        # submits went measurably slower (bench_statements --threads 8). SQLite allows no UPDATE inside WITH,
        # and runs one write transaction at a time anyway.
        columns, params = row_values(OutboxEvent, connection, **values)
        del params[columns.index("seq")]  # the bumped counter takes its place
        with connection.cursor() as cursor:
            cursor.execute(_bump_and_insert_sql(connection.alias), [agent_id, *params])
            if cursor.rowcount != 1:
                raise Agent.DoesNotExist(f"no agent {agent_id} to append an event for")
        return
    seq, webhook_url = agent_event_seq_bump(agent_id)
    OutboxEvent.objects.create(**{**values, "seq": seq, "next_attempt_at": values.get("next_attempt_at") if webhook_url else None})


def agent_event_seq_bump(agent_id: int) -> tuple[int, str]:
    """Add one to the agent's ``event_seq``: the new number and the agent's webhook URL. The row
    stays locked until the caller's transaction ends. Raises ``Agent.DoesNotExist``."""
    from askcards.models import Agent

    connection = connection_for(Agent)
    with connection.cursor() as cursor:
        # One statement bumps and reads the counter (RETURNING: SQLite ≥ 3.35 and PostgreSQL).
        cursor.execute(_bump_sql(connection.alias), [agent_id])
        bumped = cursor.fetchone()
    if bumped is None:
        raise Agent.DoesNotExist(f"no agent {agent_id} to append an event for")
    return bumped[0], bumped[1]


@functools.lru_cache(maxsize=None)
def _bump_sql(alias: str) -> str:
    from askcards.models import Agent

    connection = connections[alias]
    return (
        f"UPDATE {quote(connection, Agent._meta.db_table)} SET {quote(connection, 'event_seq')} = "
        f"{quote(connection, 'event_seq')} + 1 WHERE {quote(connection, 'id')} = %s "
        f"RETURNING {quote(connection, 'event_seq')}, {quote(connection, 'webhook_url')}"
    )


@functools.lru_cache(maxsize=None)
def _bump_and_insert_sql(alias: str) -> str:
    """PostgreSQL: ``_bump_sql`` and the event's INSERT in one statement. The parameters: the
    agent's id, then every column's value but ``seq``. Each is cast to its column's type, as a
    parameter in a SELECT list has none of its own."""
    from askcards.models import OutboxEvent

    connection = connections[alias]
    fields = insert_fields(OutboxEvent)
    values = []
    for field in fields:
        typed = f"CAST(%s AS {field.cast_db_type(connection)})"
        if field.name == "seq":
            values.append(f"bumped.{quote(connection, 'event_seq')}")
        elif field.name == "next_attempt_at":
            values.append(f"CASE WHEN bumped.{quote(connection, 'webhook_url')} <> '' THEN {typed} END")
        else:
            values.append(typed)
    return (
        f"WITH bumped AS ({_bump_sql(alias)}) INSERT INTO {quote(connection, OutboxEvent._meta.db_table)} "
        f"({', '.join(quote(connection, column(field)) for field in fields)}) SELECT {', '.join(values)} FROM bumped"
    )


# ---------------------------------------------------------------------------- card messages


def card_message_claim(pk: int, *, until: datetime, now: datetime, **unchanged: Any) -> bool:
    """Move a due card message's ``next_sync_at`` to ``until`` (a worker's claim on its next push).

    Due: its ``version`` is ahead of ``synced_version`` and ``next_sync_at`` is empty or not after
    ``now``. False when it is not due, or when a field named in ``unchanged`` no longer has the
    given value (compared as stored: plain values only)."""
    from askcards.models import CardMessage

    connection = connection_for(CardMessage)
    sql = _claim_sql(connection.alias, tuple(unchanged))
    with connection.cursor() as cursor:
        cursor.execute(sql, [db_datetime(connection, until), pk, db_datetime(connection, now), *unchanged.values()])
        return cursor.rowcount == 1


@functools.lru_cache(maxsize=None)
def _claim_sql(alias: str, unchanged: tuple[str, ...]) -> str:
    from askcards.models import CardMessage

    connection = connections[alias]
    fields = {field.name: field for field in CardMessage._meta.concrete_fields}
    quoted = {name: quote(connection, column(fields[name])) for name in
              ("id", "version", "synced_version", "next_sync_at", *unchanged)}
    return (
        f"UPDATE {quote(connection, CardMessage._meta.db_table)} SET {quoted['next_sync_at']} = %s "
        f"WHERE {quoted['id']} = %s AND {quoted['version']} > {quoted['synced_version']} "
        f"AND ({quoted['next_sync_at']} IS NULL OR {quoted['next_sync_at']} <= %s)"
        + "".join(f" AND {quoted[name]} = %s" for name in unchanged)
    )


def progress_card_mark(*, session_id: str) -> int:
    """One more render of the session's latest progress card (the highest id, as
    ``ProgressCard.objects.runs_of`` orders them): ``version + 1`` on each of its messages.
    Returns how many messages were marked."""
    from askcards.models import CardMessage

    connection = connection_for(CardMessage)
    with connection.cursor() as cursor:
        cursor.execute(_mark_sql(connection.alias), [session_id])
        return cursor.rowcount


@functools.lru_cache(maxsize=None)
def _mark_sql(alias: str) -> str:
    from askcards.models import CardMessage, ProgressCard

    connection = connections[alias]
    version, progress_card_id = quote(connection, "version"), quote(connection, "progress_card_id")
    card_id, session_id = quote(connection, "id"), quote(connection, "session_id")
    return (
        f"UPDATE {quote(connection, CardMessage._meta.db_table)} SET {version} = {version} + 1 "
        f"WHERE {progress_card_id} = (SELECT {card_id} FROM {quote(connection, ProgressCard._meta.db_table)} "
        f"WHERE {session_id} = %s ORDER BY {card_id} DESC LIMIT 1)"
    )


