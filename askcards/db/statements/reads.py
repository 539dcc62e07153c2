"""The hot reads, written out: a card click's ask, a woken wait's ask and its respondents, the
panel's ask, and what a progress card shows."""
from __future__ import annotations

import functools
from typing import Any

from django.db import connections

from .base import (ask_and_session, column, columns_of, concrete_field, connection_for, field_names, instance,
                  keep_related, quote, rows_of)


def clicked_ask(*, ask_id: str, bot_id: int, platform: str, message_id: str) -> tuple[Any, Any]:
    """One read for a card click: the ask (of a session of bot ``bot_id``) with its ``session``,
    and the progress card whose message ``message_id`` of ``platform`` was clicked, if any.
    (None, None) when there is no such ask; the card is None when the message is not a progress
    card's message of that bot (or ``message_id`` is blank)."""
    from askcards.models import Ask, ProgressCard, Session

    connection = connection_for(Ask)
    with connection.cursor() as cursor:
        cursor.execute(_clicked_ask_sql(connection.alias), [platform, bot_id, message_id, ask_id, bot_id])
        row = cursor.fetchone()
    if row is None:
        return None, None
    ask, ask.session, card = rows_of(connection, row, Ask, Session, ProgressCard)
    return ask, (None if card.pk is None else card)  # the card's columns are NULL when the message matched none


@functools.lru_cache(maxsize=None)
def _clicked_ask_sql(alias: str) -> str:
    from askcards.models import CardMessage, ProgressCard

    connection = connections[alias]
    q = functools.partial(quote, connection)
    return (
        ask_and_session(connection, (ProgressCard, "c"))
        # message_id <> '': the condition of the unique (platform, message_id) index, so a plan
        # made without the values can still use it.
        + f"LEFT OUTER JOIN {q(CardMessage._meta.db_table)} m ON m.{q('platform')} = %s AND m.{q('bot_id')} = %s "
        f"AND m.{q('message_id')} = %s AND m.{q('message_id')} <> '' "
        f"LEFT OUTER JOIN {q(ProgressCard._meta.db_table)} c ON c.{q('id')} = m.{q('progress_card_id')} "
        f"WHERE a.{q('id')} = %s AND s.{q('bot_id')} = %s LIMIT 1"
    )


def agent_by_key_hash(key_hash: str) -> Any:
    """The agent whose key hashes to ``key_hash``, its webhook secret not read (only the worker
    reads it: an agent whose stored secret the current key cannot decrypt still uses the API), or
    None. Every keyed request's first read (``selectors.agent_for_authorization``), and most of
    what a parked long-poll's re-poll does: as ORM code, compiling it cost more than the database's
    work."""
    from askcards.models import Agent

    connection = connection_for(Agent)
    with connection.cursor() as cursor:
        cursor.execute(_agent_by_key_sql(connection.alias), [key_hash])
        row = cursor.fetchone()
    return None if row is None else instance(Agent, connection, _api_agent_fields(), row)


@functools.lru_cache(maxsize=None)
def _api_agent_fields() -> tuple[str, ...]:
    from askcards.models import Agent

    return tuple(name for name in field_names(Agent) if name != "webhook_secret")


@functools.lru_cache(maxsize=None)
def _agent_by_key_sql(alias: str) -> str:
    from askcards.models import Agent

    connection = connections[alias]
    q = functools.partial(quote, connection)
    columns = ", ".join(q(column(concrete_field(Agent, name))) for name in _api_agent_fields())
    return f"SELECT {columns} FROM {q(Agent._meta.db_table)} WHERE {q('key_hash')} = %s LIMIT 1"


def agent_ask(*, agent_id: int, ask_id: str) -> Any:
    """Agent ``agent_id``'s ask ``ask_id`` with its ``session``, or None: what a woken long-poll,
    MCP call or task-result wait reads (``selectors.ask_get``). As ORM code (``select_related``)
    its compiling cost more than the database's work, on every wake (bench_longpoll)."""
    from askcards.models import Ask, Session

    connection = connection_for(Ask)
    with connection.cursor() as cursor:
        cursor.execute(_agent_ask_sql(connection.alias), [ask_id, agent_id])
        row = cursor.fetchone()
    if row is None:
        return None
    ask, ask.session = rows_of(connection, row, Ask, Session)
    return ask


@functools.lru_cache(maxsize=None)
def _agent_ask_sql(alias: str) -> str:
    connection = connections[alias]
    q = functools.partial(quote, connection)
    return ask_and_session(connection) + f"WHERE a.{q('id')} = %s AND a.{q('agent_id')} = %s LIMIT 1"


def ask_respondents(ask: Any) -> None:
    """Read ``ask``'s respondents, in their order, into ``ask.respondents.all()`` (what
    ``prefetch_related`` would leave there): every woken wait renders them (the REST shape lists
    them, an MCP result is made from them), and as ORM code compiling the query cost more than
    the database's work."""
    from askcards.models import Respondent

    connection = connection_for(Respondent)
    with connection.cursor() as cursor:
        cursor.execute(_ask_respondents_sql(connection.alias), [ask.pk])
        rows = cursor.fetchall()
    names = field_names(Respondent)
    keep_related(ask, "respondents", [instance(Respondent, connection, names, row) for row in rows])



@functools.lru_cache(maxsize=None)
def _ask_respondents_sql(alias: str) -> str:
    from askcards.models import Respondent

    connection = connections[alias]
    q = functools.partial(quote, connection)
    return (f"SELECT {columns_of(connection, Respondent, 'r')} FROM {q(Respondent._meta.db_table)} r "
            f"WHERE r.{q('ask_id')} = %s ORDER BY r.{q('position')}, r.{q('id')}")


def panel_ask(*, username: str, ask_id: str) -> Any:
    """Ask ``ask_id`` with its ``session`` and ``agent`` when the panel of web user ``username``
    may see it (a session naming them, of an agent that granted them), else None; its respondents
    are not read (``ask.respondents`` reads them when a DingTalk form needs them). Read for every
    panel answer, its history line and every ask shown: as ORM code (the grant's joins, a prefetch)
    the panel's largest share of CPU per answer (bench_longpoll)."""
    from askcards.models import Agent, Ask, Session

    connection = connection_for(Ask)
    with connection.cursor() as cursor:
        cursor.execute(_panel_ask_sql(connection.alias), [ask_id, username, username])
        row = cursor.fetchone()
    if row is None:
        return None
    ask, ask.session, ask.agent = rows_of(connection, row, Ask, Session, Agent)
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
        ask_and_session(connection, (Agent, "g"))
        + f"INNER JOIN {q(Agent._meta.db_table)} g ON g.{q('id')} = a.{q('agent_id')} "
        f"WHERE a.{q('id')} = %s AND s.{q('web_user')} = %s AND EXISTS (SELECT 1 FROM "
        f"{q(grants.m2m_db_table())} w INNER JOIN {q(users._meta.db_table)} u "
        f"ON u.{q(column(users._meta.pk))} = w.{q(grants.m2m_reverse_name())} "
        f"WHERE w.{q(grants.m2m_column_name())} = a.{q('agent_id')} AND u.{q(column(username))} = %s) LIMIT 1"
    )


# What a card's forms need of each pending ask (surfaces.feishu.surface.render).
FORM_FIELDS = ("id", "session_id", "questions", "sender_id", "surfaces")
# What a card's withdrawn lines need of each withdrawn ask (surfaces.feishu.surface.withdrawn_asks).
WITHDRAWN_FIELDS = (*FORM_FIELDS, "reason", "closed_at", "closed_on")


def card_asks(session_ids: list[str], *, pending: int, withdrawn_reasons: tuple[str, ...],
              withdrawn: int, answered_on: tuple[str, ...] = ()) -> dict[str, tuple[list[Any], list[Any]]]:
    """What a progress card of each of these sessions shows, in one statement: the session's first
    ``pending`` pending asks in registration order (created_at, id; ``FORM_FIELDS`` loaded), and
    its latest ``withdrawn`` asks cancelled for one of ``withdrawn_reasons`` after being shown
    (activated) together with its latest ``withdrawn`` asks answered on one of the surfaces
    ``answered_on`` (ask_answered_on_host_idx), newest closed first (``WITHDRAWN_FIELDS`` loaded).
    Sessions with neither are left out.

    Every click's response card and every card push reads both. They were a statement each, the
    withdrawn asks an ORM query per render: on PostgreSQL a large share of a submit's and of a
    push's time in process (cProfile), and the bulk of what bench_feishu_callback saw grow per
    submit. sync_due reads them once per batch."""
    from askcards.models import Ask

    if not session_ids:
        return {}
    connection = connection_for(Ask)
    sessions = list(dict.fromkeys(session_ids))
    params: list[Any] = [Ask.Status.PENDING, *sessions, pending]
    params += [Ask.Status.CANCELLED, *sessions, *withdrawn_reasons, withdrawn]
    if answered_on:
        params += [*sessions, withdrawn]
    with connection.cursor() as cursor:
        cursor.execute(_card_asks_sql(connection.alias, len(sessions), len(withdrawn_reasons), answered_on), params)
        rows = cursor.fetchall()
    found: dict[str, tuple[list[Any], list[Any]]] = {}
    width = len(WITHDRAWN_FIELDS)
    for row in rows:  # ordered by kind, session, then each kind's order
        kind, values = row[width], row[:width]
        shown = found.setdefault(values[1], ([], []))
        if kind == 0:
            shown[0].append(instance(Ask, connection, FORM_FIELDS, values[:len(FORM_FIELDS)]))
        else:
            shown[1].append(instance(Ask, connection, WITHDRAWN_FIELDS, values))
    if answered_on:  # two arms of ended asks: newest closed first across both, as one list
        for _, ended in found.values():
            ended.sort(key=lambda ask: (ask.closed_at, ask.pk), reverse=True)
            del ended[withdrawn:]
    return found


@functools.lru_cache(maxsize=None)
def _card_asks_sql(alias: str, sessions: int, reasons: int, answered_on: tuple[str, ...]) -> str:
    """Every kind of row carries ``WITHDRAWN_FIELDS``' columns (``FORM_FIELDS`` first, then reason,
    closed_at and closed_on), the kind (0 pending, 1 withdrawn, 2 answered on one of the surfaces
    ``answered_on``; no such arm when none) and the rank within the session. The first two arms
    read the session's rows of one status (ask_session_status_created_idx), the third the partial
    index of its few asks answered where the card cannot show it (ask_answered_on_host_idx). That
    arm's surfaces are written into the statement, not bound: a planner proves a partial index's
    condition only from values it can see (SQLite always, PostgreSQL's generic plans); they are
    surface names of our own, checked to be plain words. It names an answer by its reasons, not
    by its status: PostgreSQL, its statistics taken before the answers came (a busy table between
    two autovacuum analyses), took the status index for "status = 'answered'" and read every
    answered ask of the table on each card push."""
    from askcards.models import Ask

    connection = connections[alias]
    q = functools.partial(quote, connection)
    pending_columns = [q(column(concrete_field(Ask, name))) for name in FORM_FIELDS]
    extra = [q(column(concrete_field(Ask, name))) for name in WITHDRAWN_FIELDS[len(FORM_FIELDS):]]
    table, in_sessions = q(Ask._meta.db_table), ", ".join(["%s"] * sessions)
    select = ", ".join(pending_columns + extra)
    kind = len(pending_columns) + len(extra) + 1  # the kind's column number; the session's is 2
    answered = ""
    if answered_on:
        if not all(name.isidentifier() and name.isascii() for name in answered_on):
            raise ValueError(f"not surface names: {answered_on!r}")
        literals = ", ".join(f"'{name}'" for name in answered_on)
        answers = ", ".join(f"'{reason.value}'" for reason in (Ask.Reason.SUBMITTED, Ask.Reason.EMPTY))
        answered = (
            f"UNION ALL "
            f"SELECT {select}, 2 AS kind, n FROM (SELECT {select}, ROW_NUMBER() OVER (PARTITION BY {q('session_id')} "
            f"ORDER BY {q('closed_at')} DESC, {q('id')} DESC) AS n FROM {table} "
            f"WHERE {q('closed_on')} IN ({literals}) AND {q('reason')} IN ({answers}) "
            f"AND {q('session_id')} IN ({in_sessions}) AND {q('activated_at')} IS NOT NULL) answered "
            f"WHERE n <= %s "
        )
    return (
        f"SELECT {select}, 0 AS kind, n FROM (SELECT {select}, ROW_NUMBER() OVER (PARTITION BY {q('session_id')} "
        f"ORDER BY {q('created_at')}, {q('id')}) AS n FROM {table} "
        f"WHERE {q('status')} = %s AND {q('session_id')} IN ({in_sessions})) pending WHERE n <= %s "
        f"UNION ALL "
        f"SELECT {select}, 1 AS kind, n FROM (SELECT {select}, ROW_NUMBER() OVER (PARTITION BY {q('session_id')} "
        f"ORDER BY {q('closed_at')} DESC, {q('id')} DESC) AS n FROM {table} "
        f"WHERE {q('status')} = %s AND {q('session_id')} IN ({in_sessions}) "
        f"AND {q('reason')} IN ({', '.join(['%s'] * reasons)}) AND {q('activated_at')} IS NOT NULL) withdrawn "
        f"WHERE n <= %s {answered}ORDER BY {kind}, 2, {kind + 1}"
    )

