"""Every hand-written SQL statement of askcards, with the one way a name is quoted in them.

The ORM writes every other statement. A statement is written out only where that was measured to
matter on a hot path, against the ORM code it replaces (``tests/bench/bench_statements.py`` and,
for the reads of a wake, ``bench_longpoll``): about 5 % of its path's CPU or more; below that it
goes back to the ORM (the rule, and the list, in docs/performance.md; the figures each was
decided on, in that file's git history). Each function builds its text once
per database (cached by the connection's alias) and runs it on that connection; names in the text
go through ``quote`` only.
"""
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


def _connection_for(model: type[models.Model]) -> BaseDatabaseWrapper:
    return connections[router.db_for_write(model)]


def _db_datetime(connection: BaseDatabaseWrapper, value: datetime) -> Any:
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


# ------------------------------------------------------------------------- callback receipts


def callback_receipt_insert(*, platform: str, event_id: str, created_at: datetime) -> bool:
    """Record a callback's (platform, event id); False when that pair is recorded already.

    ``INSERT … ON CONFLICT DO NOTHING`` (PostgreSQL and SQLite): a duplicate changes nothing and
    leaves the caller's transaction usable without a savepoint, and a concurrent duplicate waits
    for the first one's transaction, then inserts nothing if it committed."""
    from askcards.models import CallbackReceipt

    connection = _connection_for(CallbackReceipt)
    with connection.cursor() as cursor:
        cursor.execute(_receipt_sql(connection.alias), [platform, event_id, _db_datetime(connection, created_at)])
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


# -------------------------------------------------------------------------------- hot reads
# Reads on the click path, written out: the ORM spent several times what the database took
# compiling each query and building its rows (bench_statements).
# Rows still come back as model instances, each value converted as the ORM converts what it reads.


@functools.lru_cache(maxsize=None)
def _read_plan(model: type[models.Model], alias: str, names: tuple[str, ...]) -> tuple[tuple[int | None, ...], tuple[Any, ...]]:
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


def _instance(model: type[models.Model], connection: BaseDatabaseWrapper, names: tuple[str, ...], values: Any) -> Any:
    """A ``model`` instance from a statement's ``values`` for the fields ``names`` (the others
    deferred, as ``only()`` leaves them)."""
    order, converters = _read_plan(model, connection.alias, names)
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
def _field_names(model: type[models.Model]) -> tuple[str, ...]:
    return tuple(field.name for field in model._meta.concrete_fields)


def _columns(connection: BaseDatabaseWrapper, model: type[models.Model], table: str) -> str:
    """Every concrete column of ``model`` as read from ``table`` (an alias), in field order."""
    return ", ".join(f"{table}.{quote(connection, column(field))}" for field in model._meta.concrete_fields)


def _rows_of(connection: BaseDatabaseWrapper, row: Any, *models_: type[models.Model]) -> list[Any]:
    """One instance per model from a row that holds every concrete column of each, in turn."""
    instances, at = [], 0
    for model in models_:
        names = _field_names(model)
        instances.append(_instance(model, connection, names, row[at:at + len(names)]))
        at += len(names)
    return instances


def _ask_and_session(connection: BaseDatabaseWrapper, *more: tuple[type[models.Model], str]) -> str:
    """``SELECT`` every column of an ask (``a``), its session (``s``) and each of ``more`` (a model
    and its alias, joined by the caller) ``FROM`` the ask joined to its session."""
    from askcards.models import Ask, Session

    q = functools.partial(quote, connection)
    tables: tuple[tuple[type[models.Model], str], ...] = ((Ask, "a"), (Session, "s"), *more)
    columns = [_columns(connection, model, alias) for model, alias in tables]
    return (
        f"SELECT {', '.join(columns)} FROM {q(Ask._meta.db_table)} a "
        f"INNER JOIN {q(Session._meta.db_table)} s ON s.{q('id')} = a.{q('session_id')} "
    )


def clicked_ask(*, ask_id: str, bot_id: int, platform: str, message_id: str) -> tuple[Any, Any]:
    """One read for a card click: the ask (of a session of bot ``bot_id``) with its ``session``,
    and the progress card whose message ``message_id`` of ``platform`` was clicked, if any.
    (None, None) when there is no such ask; the card is None when the message is not a progress
    card's message of that bot (or ``message_id`` is blank)."""
    from askcards.models import Ask, ProgressCard, Session

    connection = _connection_for(Ask)
    with connection.cursor() as cursor:
        cursor.execute(_clicked_ask_sql(connection.alias), [platform, bot_id, message_id, ask_id, bot_id])
        row = cursor.fetchone()
    if row is None:
        return None, None
    ask, ask.session, card = _rows_of(connection, row, Ask, Session, ProgressCard)
    return ask, (None if card.pk is None else card)  # the card's columns are NULL when the message matched none


@functools.lru_cache(maxsize=None)
def _clicked_ask_sql(alias: str) -> str:
    from askcards.models import CardMessage, ProgressCard

    connection = connections[alias]
    q = functools.partial(quote, connection)
    return (
        _ask_and_session(connection, (ProgressCard, "c"))
        # message_id <> '': the condition of the unique (platform, message_id) index, so a plan
        # made without the values can still use it.
        + f"LEFT OUTER JOIN {q(CardMessage._meta.db_table)} m ON m.{q('platform')} = %s AND m.{q('bot_id')} = %s "
        f"AND m.{q('message_id')} = %s AND m.{q('message_id')} <> '' "
        f"LEFT OUTER JOIN {q(ProgressCard._meta.db_table)} c ON c.{q('id')} = m.{q('progress_card_id')} "
        f"WHERE a.{q('id')} = %s AND s.{q('bot_id')} = %s LIMIT 1"
    )


def agent_ask(*, agent_id: int, ask_id: str) -> Any:
    """Agent ``agent_id``'s ask ``ask_id`` with its ``session``, or None: what a woken long-poll,
    MCP call or task-result wait reads (``selectors.ask_get``). As ORM code (``select_related``)
    its compiling cost more than the database's work, on every wake (bench_longpoll)."""
    from askcards.models import Ask, Session

    connection = _connection_for(Ask)
    with connection.cursor() as cursor:
        cursor.execute(_agent_ask_sql(connection.alias), [ask_id, agent_id])
        row = cursor.fetchone()
    if row is None:
        return None
    ask, ask.session = _rows_of(connection, row, Ask, Session)
    return ask


@functools.lru_cache(maxsize=None)
def _agent_ask_sql(alias: str) -> str:
    connection = connections[alias]
    q = functools.partial(quote, connection)
    return _ask_and_session(connection) + f"WHERE a.{q('id')} = %s AND a.{q('agent_id')} = %s LIMIT 1"


def ask_respondents(ask: Any) -> None:
    """Read ``ask``'s respondents, in their order, into ``ask.respondents.all()`` (what
    ``prefetch_related`` would leave there): every woken wait renders them (the REST shape lists
    them, an MCP result is made from them), and as ORM code compiling the query cost more than
    the database's work."""
    from askcards.models import Respondent

    connection = _connection_for(Respondent)
    with connection.cursor() as cursor:
        cursor.execute(_ask_respondents_sql(connection.alias), [ask.pk])
        rows = cursor.fetchall()
    names = _field_names(Respondent)
    keep_related(ask, "respondents", [_instance(Respondent, connection, names, row) for row in rows])


def keep_related(instance: models.Model, name: str, rows: list[Any]) -> None:
    """``rows`` as ``instance``'s related ``name`` (what ``prefetch_related`` leaves, where
    ``instance.<name>.all()`` looks first): rows read by hand, or just written, need no query."""
    instance.__dict__.setdefault("_prefetched_objects_cache", {})[name] = rows


@functools.lru_cache(maxsize=None)
def _ask_respondents_sql(alias: str) -> str:
    from askcards.models import Respondent

    connection = connections[alias]
    q = functools.partial(quote, connection)
    return (f"SELECT {_columns(connection, Respondent, 'r')} FROM {q(Respondent._meta.db_table)} r "
            f"WHERE r.{q('ask_id')} = %s ORDER BY r.{q('position')}, r.{q('id')}")


def panel_ask(*, username: str, ask_id: str) -> Any:
    """Ask ``ask_id`` with its ``session`` and ``agent`` when the panel of web user ``username``
    may see it (a session naming them, of an agent that granted them), else None; its respondents
    are not read (``ask.respondents`` reads them when a DingTalk form needs them). Read for every
    panel answer, its history line and every ask shown: as ORM code (the grant's joins, a prefetch)
    the panel's largest share of CPU per answer (bench_longpoll)."""
    from askcards.models import Agent, Ask, Session

    connection = _connection_for(Ask)
    with connection.cursor() as cursor:
        cursor.execute(_panel_ask_sql(connection.alias), [ask_id, username, username])
        row = cursor.fetchone()
    if row is None:
        return None
    ask, ask.session, ask.agent = _rows_of(connection, row, Ask, Session, Agent)
    return ask


@functools.lru_cache(maxsize=None)
def _panel_ask_sql(alias: str) -> str:
    from django.contrib.auth import get_user_model

    from askcards.models import Agent

    connection = connections[alias]
    q = functools.partial(quote, connection)
    grants = Agent.web_users.field
    users = get_user_model()
    username = concrete_field(users, users.USERNAME_FIELD)
    return (
        _ask_and_session(connection, (Agent, "g"))
        + f"INNER JOIN {q(Agent._meta.db_table)} g ON g.{q('id')} = a.{q('agent_id')} "
        f"WHERE a.{q('id')} = %s AND s.{q('web_user')} = %s AND EXISTS (SELECT 1 FROM "
        f"{q(grants.m2m_db_table())} w INNER JOIN {q(users._meta.db_table)} u "
        f"ON u.{q(column(users._meta.pk))} = w.{q(grants.m2m_reverse_name())} "
        f"WHERE w.{q(grants.m2m_column_name())} = a.{q('agent_id')} AND u.{q(column(username))} = %s) LIMIT 1"
    )


# What a card's forms need of each pending ask (surfaces.feishu.surface.render).
FORM_FIELDS = ("id", "session_id", "questions", "sender_id", "surfaces")
# What a card's withdrawn lines need of each withdrawn ask (surfaces.feishu.surface.withdrawn_asks).
WITHDRAWN_FIELDS = (*FORM_FIELDS, "reason", "closed_at")


def card_asks(session_ids: list[str], *, pending: int, withdrawn_reasons: tuple[str, ...],
              withdrawn: int) -> dict[str, tuple[list[Any], list[Any]]]:
    """What a progress card of each of these sessions shows, in one statement: the session's first
    ``pending`` pending asks in registration order (created_at, id; ``FORM_FIELDS`` loaded), and
    its latest ``withdrawn`` asks cancelled for one of ``withdrawn_reasons`` after being shown
    (activated), newest closed first (``WITHDRAWN_FIELDS`` loaded). Sessions with neither are
    left out.

    Every click's response card and every card push reads both. They were a statement each, the
    withdrawn asks an ORM query per render: on PostgreSQL a large share of a submit's and of a
    push's time in process (cProfile), and the bulk of what bench_feishu_callback saw grow per
    submit. sync_due reads them once per batch."""
    from askcards.models import Ask

    if not session_ids:
        return {}
    connection = _connection_for(Ask)
    sessions = list(dict.fromkeys(session_ids))
    params: list[Any] = [Ask.Status.PENDING, *sessions, pending]
    params += [Ask.Status.CANCELLED, *sessions, *withdrawn_reasons, withdrawn]
    with connection.cursor() as cursor:
        cursor.execute(_card_asks_sql(connection.alias, len(sessions), len(withdrawn_reasons)), params)
        rows = cursor.fetchall()
    found: dict[str, tuple[list[Any], list[Any]]] = {}
    width = len(WITHDRAWN_FIELDS)
    for row in rows:  # ordered by kind, session, then each kind's order
        kind, values = row[width], row[:width]
        shown = found.setdefault(values[1], ([], []))
        if kind == 0:
            shown[0].append(_instance(Ask, connection, FORM_FIELDS, values[:len(FORM_FIELDS)]))
        else:
            shown[1].append(_instance(Ask, connection, WITHDRAWN_FIELDS, values))
    return found


@functools.lru_cache(maxsize=None)
def _card_asks_sql(alias: str, sessions: int, reasons: int) -> str:
    """Both kinds of row carry ``WITHDRAWN_FIELDS``' columns (``FORM_FIELDS`` first, then reason
    and closed_at), the kind (0 pending, 1 withdrawn) and the rank within the session. Each arm
    reads the session's rows of one status (ask_session_status_created_idx)."""
    from askcards.models import Ask

    connection = connections[alias]
    q = functools.partial(quote, connection)
    pending_columns = [q(column(concrete_field(Ask, name))) for name in FORM_FIELDS]
    extra = [q(column(concrete_field(Ask, name))) for name in WITHDRAWN_FIELDS[len(FORM_FIELDS):]]
    table, in_sessions = q(Ask._meta.db_table), ", ".join(["%s"] * sessions)
    select = ", ".join(pending_columns + extra)
    return (
        f"SELECT {select}, 0 AS kind, n FROM (SELECT {select}, ROW_NUMBER() OVER (PARTITION BY {q('session_id')} "
        f"ORDER BY {q('created_at')}, {q('id')}) AS n FROM {table} "
        f"WHERE {q('status')} = %s AND {q('session_id')} IN ({in_sessions})) pending WHERE n <= %s "
        f"UNION ALL "
        f"SELECT {select}, 1 AS kind, n FROM (SELECT {select}, ROW_NUMBER() OVER (PARTITION BY {q('session_id')} "
        f"ORDER BY {q('closed_at')} DESC, {q('id')} DESC) AS n FROM {table} "
        f"WHERE {q('status')} = %s AND {q('session_id')} IN ({in_sessions}) "
        f"AND {q('reason')} IN ({', '.join(['%s'] * reasons)}) AND {q('activated_at')} IS NOT NULL) withdrawn "
        f"WHERE n <= %s ORDER BY 8, 2, 9"
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

    connection = _connection_for(Ask)
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

    connection = _connection_for(OutboxEvent)
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

    connection = _connection_for(Agent)
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

    connection = _connection_for(CardMessage)
    sql = _claim_sql(connection.alias, tuple(unchanged))
    with connection.cursor() as cursor:
        cursor.execute(sql, [_db_datetime(connection, until), pk, _db_datetime(connection, now), *unchanged.values()])
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

    connection = _connection_for(CardMessage)
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


# ------------------------------------------------------------------------------ row counts


def table_row_estimate(model: type[models.Model]) -> int | None:
    """PostgreSQL's estimate of the rows in ``model``'s table (``pg_class.reltuples``, kept by
    VACUUM / ANALYZE / autovacuum), read in well under a millisecond at any size; None on another
    database or when the table was never analysed. For the admin's counts (``selectors.
    changelist_count``): an exact ``COUNT(*)`` reads the whole table."""
    connection = _connection_for(model)
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


# ----------------------------------------------------------------------------- expressions


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
    At 2000 sockets on a PostgreSQL whose disk was busy, each presence UPDATE's own flush kept the
    panel sockets' database threads waiting (bench_scaleout). Elsewhere a no-op."""
    connection = _connection_for(model)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")
