"""What a signed-in person's web panel shows."""
from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth import get_user_model
from django.db.models import QuerySet, prefetch_related_objects

from ..db import statements
from ..models import Ask, Respondent, Session
from ..tools.dingtalk_ask_user_question.schema import NAME as DINGTALK_TOOL


# ------------------------------------------------------------------------------------ web panel
# What a signed-in person's panel shows (SPEC §6.3): the asks of the sessions that name them as
# web_user, of agents an operator granted them (a revoked grant hides the agent's asks at once).

PANEL_HISTORY_SIZE = 10  # closed asks a panel lists under "最近回答"
PANEL_BEAT_CHUNK = 500  # users (or sockets) one statement of the panels' heartbeat names


def panel_asks(username: str) -> QuerySet[Ask]:
    username_field = get_user_model().USERNAME_FIELD
    return Ask.objects.filter(session__web_user=username, **{f"agent__web_users__{username_field}": username})


def panel_identity(session: Session) -> str:
    """Who the session's web user is on its platform, case-folded: the person the session talks
    to (its ``user_id``; the web username when it has none, as ``tool_call`` picks an owner)."""
    return (session.user_id or session.web_user).casefold()


def panel_respondent(ask: Ask) -> Respondent | None:
    """The panel user's own row of a DingTalk form ask (read from ``ask.respondents``, prefetched
    by the panel's queries), or None when they are not one of its respondents."""
    identity = panel_identity(ask.session)
    return next((row for row in ask.respondents.all() if row.respondent_key == identity), None)


def panel_answerable(ask: Ask) -> bool:
    """Whether the panel may answer this ask at all: it was put on the panel, and a DingTalk form
    only for the panel user's own respondent row (targeted collections: if they are a target)."""
    if "web" not in ask.surfaces:
        return False
    return ask.tool != DINGTALK_TOOL or panel_respondent(ask) is not None


def _panel_rows(queryset: QuerySet[Ask]) -> QuerySet[Ask]:
    return queryset.select_related("session", "agent").prefetch_related("respondents")


def panel_ask(*, username: str, ask_id: str) -> Ask | None:
    """One ask this user's panel may see (``panel_asks``), with its session and agent; None
    otherwise. One statement (``db.statements.panel_ask``: every panel answer, history line and
    shown ask reads it); the respondents are read only when a DingTalk form's are needed."""
    ask = statements.panel_ask(username=username, ask_id=ask_id)
    if ask is not None and ask.tool == DINGTALK_TOOL:
        prefetch_related_objects([ask], "respondents")  # panel_respondent reads them
    return ask


def panel_asks_by_id(*, username: str, ask_ids: list[str]) -> list[Ask]:
    """The asks among ``ask_ids`` this user's panel may see, oldest first (one query and its prefetch)."""
    return list(_panel_rows(panel_asks(username).filter(pk__in=ask_ids)).order_by("created_at", "id"))


def panel_next(*, username: str, ask_ids: list[str], limit: int) -> list[Ask]:
    """The oldest ``limit`` pending asks among ``ask_ids`` this user's panel may see."""
    asks = panel_asks(username).filter(pk__in=ask_ids, status=Ask.Status.PENDING).order_by("created_at", "id")
    return list(_panel_rows(asks)[:limit])


def panel_waiting(ask: Ask) -> bool:
    """Whether this pending ask (read by the panel's queries) waits for the panel user's answer: it
    is answerable there, and a DingTalk collection they already responded to waits for others."""
    if not panel_answerable(ask):
        return False
    row = panel_respondent(ask) if ask.tool == DINGTALK_TOOL else None
    return row is None or row.status == Respondent.Status.PENDING


def panel_pending(username: str) -> list[Ask]:
    """The asks waiting for this user's answer on the panel, oldest first."""
    asks = _panel_rows(panel_asks(username).filter(status=Ask.Status.PENDING)).order_by("created_at", "id")
    return [ask for ask in asks if panel_waiting(ask)]


def panel_pending_ids(usernames: Iterable[str]) -> dict[str, set[str]]:
    """The ids of the pending asks of every session naming each of these web users (users without
    one are left out): a superset of ``panel_pending`` (no grant check, no per-ask rules), for the
    connected panels' catch-up, run for all of a process's sockets every 30 s.

    Two statements per ``PANEL_BEAT_CHUNK`` users, each with one plan whatever the planner believes:
    the users' sessions by ``web_user``, then their pending asks by ``(session_id, status)``. One
    join read every pending ask of the deployment on this PostgreSQL (no statistics yet: the
    planner chose the status index), and the sockets' catch-ups kept the whole machine busy
    (bench_scaleout)."""
    names = sorted(set(usernames))
    found: dict[str, set[str]] = {}
    for start in range(0, len(names), PANEL_BEAT_CHUNK):
        owner = dict(Session.objects.filter(web_user__in=names[start:start + PANEL_BEAT_CHUNK])
                     .values_list("id", "web_user"))
        if not owner:
            continue
        for ask_id, session_id in (Ask.objects.filter(session_id__in=list(owner), status=Ask.Status.PENDING)
                                   .values_list("id", "session_id")):
            found.setdefault(owner[session_id], set()).add(ask_id)
    return found


def panel_history(username: str, *, limit: int = PANEL_HISTORY_SIZE) -> list[Ask]:
    """The user's most recently closed asks, newest first: every ended ask of their sessions but
    those that never reached anyone (failed), and DingTalk forms only where they were a respondent."""
    closed = (
        panel_asks(username)
        .exclude(status__in=(*Ask.OPEN, Ask.Status.FAILED))
        .order_by("-closed_at", "-id")
    )
    # A few more rows than shown: collections they were not asked in are skipped.
    rows = [ask for ask in _panel_rows(closed)[: limit * 3] if ask.tool != DINGTALK_TOOL or panel_respondent(ask)]
    return rows[:limit]
