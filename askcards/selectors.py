"""Shared reads, and the public shapes of asks and events (API, events feed, webhooks and MCP agree)."""
from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db import models
from django.db.models import QuerySet, prefetch_related_objects
from django.db.models.functions import Coalesce
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from rest_framework import serializers

from . import crypto, tools
from .db import statements
from .errors import BotSecretsUnreadable, CallbackRefused, NotFound, Unauthenticated
from .models import Agent, Ask, AskEvent, Bot, CardMessage, OutboxEvent, PanelPresence, PrunedTally, Respondent, Session
from .tools.dingtalk_ask_user_question.schema import NAME as DINGTALK_TOOL


def unique_row(queryset: QuerySet) -> Any:
    """The row a unique lookup finds, or None: a plain LIMIT 1, without ``first()``'s ORDER BY."""
    return next(iter(queryset[:1]), None)


def clicked_ask(bot: Bot, ask_id: str, message_id: str) -> tuple[Ask | None, Any]:
    """A card click's ask (a session of ``bot``'s, ``session`` loaded) and the progress card whose
    message was clicked, in one read (``db.statements.clicked_ask``): the click path's hot read.
    (None, None) when ``bot`` has no such ask."""
    return statements.clicked_ask(ask_id=ask_id, bot_id=bot.pk, platform=bot.platform, message_id=message_id or "")


BEARER = "Bearer"


def agent_for_authorization(header: str | bytes | None) -> Agent:
    """The agent whose key an ``Authorization: Bearer <agent key>`` header carries (the REST API
    and MCP share this one rule); Unauthenticated saying what is wrong otherwise. Lookup is by
    the key's hash, so no secret is ever compared byte by byte."""
    if isinstance(header, bytes):
        try:
            header = header.decode("ascii")
        except UnicodeError:
            raise Unauthenticated("Invalid agent key: it must be ASCII.", "invalid_key") from None
    parts = (header or "").split()
    if not parts:
        raise Unauthenticated(f"This endpoint needs 'Authorization: {BEARER} <agent key>' (the agent's REST key).")
    if parts[0].lower() != BEARER.lower():
        raise Unauthenticated(f"Invalid Authorization header: expected '{BEARER} <agent key>'.", "invalid_key")
    if len(parts) != 2:
        raise Unauthenticated(
            f"Invalid Authorization header: expected exactly one key after '{BEARER}', without spaces.", "invalid_key"
        )
    # The webhook secret is read only by the worker: an agent whose stored secret the current
    # ASKCARDS_SECRET_KEY cannot decrypt (askcards.E002) still uses the API.
    agent = Agent.objects.defer("webhook_secret").filter(key_hash=crypto.hash_agent_key(parts[1])).first()
    if agent is None:
        raise Unauthenticated("Invalid agent key.", "invalid_key")
    if not agent.is_active:
        raise Unauthenticated("This agent is deactivated.", "agent_inactive")
    return agent


def session_get(*, agent: Agent, session_ref: str) -> Session:
    """A session of this agent by id or key; another agent's session is simply not found."""
    session = (
        Session.objects.select_related("bot", "parent")
        .filter(agent=agent)
        .filter(id=session_ref)
        .first()
    ) or Session.objects.select_related("bot", "parent").filter(agent=agent, key=session_ref).first()
    if session is None:
        raise NotFound(f"no session {session_ref!r} (expected a session id or key of this agent)")
    return session


def web_user_granted(*, agent: Agent, web_user: str) -> bool:
    """Whether an operator granted ``agent`` the Django user named ``web_user``. A username no
    user has is simply not granted: one query either way."""
    return agent.web_users.filter(**{get_user_model().USERNAME_FIELD: web_user}).exists()


def bot_granted(*, agent_id: int, bot_id: int) -> bool:
    """Whether an operator granted the agent ``agent_id`` the bot whose primary key is ``bot_id``."""
    return Agent.bots.through.objects.filter(agent_id=agent_id, bot_id=bot_id).exists()


# Platform callbacks name their bot by app id, many times a second, and bots change rarely: each
# process keeps the active bots it has read (secrets decrypted) for BOT_CACHE_SECONDS. A change
# saved in this process (admin, askcards_bot) clears the cache at once; other processes see it
# within BOT_CACHE_SECONDS. Unknown ids are not cached (a flood of made-up ids stays a 404 query).
BOT_CACHE_SECONDS = 10.0
_clock = time.monotonic  # the cache's clock (tests move it forward)
_active_bots: dict[tuple[str, str], tuple[float, Bot]] = {}
_unreadable_logged: set[tuple[str, str]] = set()
logger = logging.getLogger(__name__)


def callback_bot(*, platform: str, app_id: str) -> Bot:
    """The active bot a platform callback's URL names; CallbackRefused otherwise (404 for an
    unknown or inactive app, 503 when its secrets cannot be read)."""
    try:
        bot = active_bot(platform=platform, app_id=app_id)
    except BotSecretsUnreadable as exc:
        raise CallbackRefused(str(exc), status=exc.status, cause="secrets_unreadable") from None
    if bot is None:
        raise CallbackRefused("unknown app", status=404, cause="unknown_app")
    return bot


def active_bot(*, platform: str, app_id: str) -> Bot | None:
    """The active bot of this platform and app id, or None. Callers must not change it.

    Raises BotSecretsUnreadable when the bot's secrets cannot be decrypted (logged once per
    process and bot, without the secrets)."""
    key = (platform, app_id)
    cached = _active_bots.get(key)
    now = _clock()
    if cached is not None and cached[0] > now:
        return cached[1]
    try:
        bot = unique_row(Bot.objects.filter(platform=platform, app_id=app_id, is_active=True))
    except crypto.UndecryptableSecret:
        if key not in _unreadable_logged:
            _unreadable_logged.add(key)
            logger.error(
                "%s bot %s: its stored secrets cannot be decrypted with the current ASKCARDS_SECRET_KEY; "
                "its callbacks are refused (503). See manage.py check --database default.",
                platform,
                app_id,
            )
        raise BotSecretsUnreadable(
            f"{platform} app {app_id} is unavailable: the server cannot read its stored secrets "
            "(its operator has been told); try again later"
        ) from None
    if bot is None:
        _active_bots.pop(key, None)
    else:
        _active_bots[key] = (now + BOT_CACHE_SECONDS, bot)
    return bot


@receiver(post_save, sender=Bot)
@receiver(post_delete, sender=Bot)
def forget_active_bots(**kwargs: Any) -> None:
    _active_bots.clear()
    _unreadable_logged.clear()  # a bot changed: report an unreadable one again


def ask_get(*, agent: Agent, ask_id: str) -> Ask:
    """This agent's ask with its session (``db.statements.agent_ask``: every woken wait reads it)."""
    ask = statements.agent_ask(agent_id=agent.pk, ask_id=ask_id)
    if ask is None:
        raise NotFound(f"no ask {ask_id!r} (expected an ask id of this agent, like q_<32 hex>)")
    ask.agent = agent  # the row the caller holds: what reads ``ask.agent`` later (the panel's lines) reads no more
    return ask


def with_respondents(ask: Ask) -> Ask:
    """``ask`` with its respondents read into ``ask.respondents.all()``, in their order: what a
    woken wait renders (``db.statements.ask_respondents``, one statement)."""
    statements.ask_respondents(ask)
    return ask


def ask_list(*, agent: Agent, session: Session | None = None, status: str | None = None) -> QuerySet[Ask]:
    asks = Ask.objects.filter(agent=agent).select_related("session").prefetch_related("respondents")
    if session is not None:
        asks = asks.filter(session=session)
    if status:
        asks = asks.filter(status=status)
    return asks.order_by("-created_at", "-id")


def ask_page(*, agent: Agent, session: Session | None = None, status: str | None = None, limit: int) -> list[Ask]:
    """The first ``limit`` asks of ``ask_list``.

    Filtered by status only, the page's ids come first, from ask_agent_status_created_idx alone
    (an index-only scan of that agent's rows of that status, newest first), then their rows by
    primary key: the page costs the same for a status with no rows, a rare one or a common one,
    on an agent's millionth ask as on its first. As one statement PostgreSQL would rather walk the
    agent's asks newest first and drop the other statuses' rows, which reads the whole history for
    a status with none (and the plan it keeps for a prepared statement did that for every status);
    tests/scale/test_api_lists_at_size.py."""
    asks = ask_list(agent=agent, session=session, status=status)
    if not status or session is not None:  # a session's asks: ask_session_status_created_idx, few rows
        return list(asks[:limit])
    newest = Ask.objects.filter(agent=agent, status=status).order_by("-created_at", "-id")
    ids = list(newest.values_list("id", flat=True)[:limit])
    return list(asks.filter(pk__in=ids)) if ids else []


def pending_asks_of_session(session: Session) -> QuerySet[Ask]:
    return Ask.objects.filter(session=session, status=Ask.Status.PENDING).order_by("created_at", "id")


# ------------------------------------------------------------------------------ public shapes
#
# An ask and an event leave the service four ways: agent API responses, the /events feed, webhook
# bodies (the outbox signs and POSTs them) and MCP's structuredContent. One serializer per shape
# builds all four, and the served OpenAPI schema is generated from these same classes
# (askcards.api.serializers uses them), so what is documented is what is sent. They live here,
# below the API, because the outbox may not import askcards.api.


@functools.cache
def _bound(shape: type[OutputSerializer]) -> OutputSerializer:
    return shape()


# An output-only serializer. ``Shape.of(obj)`` is ``Shape(obj).data``, rendered by one shared
# instance: a new serializer binds a copy of every field (for an ask that costs some 40 times the
# rendering itself), while ``to_representation`` keeps no state, so threads may share one. (No
# docstring: the schema would show it as the description of every shape that has none.)
class OutputSerializer(serializers.Serializer):
    # Fields named like a Serializer attribute (fields, data, parent) carry `type: ignore[assignment]`:
    # DRF's metaclass takes declared fields off the class, so they shadow nothing at run time, but
    # the stubs read them as overriding the attribute.

    @classmethod
    def of(cls, instance: Any) -> Any:
        return _bound(cls).to_representation(instance)


class IsoDateTime(serializers.DateTimeField):
    """A stored time in ISO 8601, UTC written ``Z``. DRF's own field converts every value to the
    current time zone first, which costs more than the rest of an ask's rendering; stored times are
    already UTC."""

    def to_representation(self, value: datetime) -> str:
        return value.isoformat().replace("+00:00", "Z")


class _BlankAsNull:
    """Output: an empty string (an unset reason or surface) reads as null."""

    def to_representation(self, value):
        return None if value == "" else super().to_representation(value)


class _BlankAsNullChar(_BlankAsNull, serializers.CharField):
    pass


class _BlankAsNullChoice(_BlankAsNull, serializers.ChoiceField):
    pass


class SessionRefOutput(OutputSerializer):
    """The session an ask or event belongs to."""

    id = serializers.CharField()
    key = serializers.CharField()


class AskTargetOutput(OutputSerializer):
    """Whom a targeted ask collects from (DingTalk); null for an ordinary ask."""

    type = serializers.ChoiceField(choices=[Ask.Target.USER, Ask.Target.GROUP], source="target_type")
    id = serializers.CharField(source="target_id", help_text="The user's or the group's id")

    def to_representation(self, ask: Ask):
        return None if ask.target_type == Ask.Target.NONE else super().to_representation(ask)


class RespondentOutput(OutputSerializer):
    id = serializers.CharField(source="respondent_id")
    status = serializers.ChoiceField(choices=Respondent.Status.choices)
    answered_at = IsoDateTime(allow_null=True)
    surface = _BlankAsNullChar(allow_null=True, help_text="Where the answer came from")


class AskOutput(OutputSerializer):
    """An ask: `questions` (ask_user_questions) or `fields` (a DingTalk form), never both;
    `result` is null while the ask is open."""

    id = serializers.CharField()
    session = SessionRefOutput()
    tool = serializers.ChoiceField(choices=list(tools.REGISTRY))
    status = serializers.ChoiceField(choices=Ask.Status.choices)
    reason = _BlankAsNullChoice(choices=Ask.Reason.choices, allow_null=True, help_text="Set once terminal")
    title = serializers.CharField(allow_blank=True)
    questions = serializers.JSONField(required=False, help_text="Absent when the ask has fields")
    fields = serializers.JSONField(  # type: ignore[assignment]  # a declared field: see OutputSerializer
        required=False, help_text="Absent when the ask has questions"
    )
    target = AskTargetOutput(source="*", allow_null=True)
    respondents = RespondentOutput(many=True)
    surfaces = serializers.ListField(child=serializers.CharField(), help_text="Where the ask is shown")
    deadline = IsoDateTime()
    created_at = IsoDateTime()
    closed_at = IsoDateTime(allow_null=True)
    result = serializers.JSONField(
        allow_null=True,
        help_text="Once terminal: answers (ask_user_questions) or responses (DingTalk), tool_result and/or message",
    )

    def to_representation(self, ask: Ask):
        data = super().to_representation(ask)
        del data["questions" if ask.fields is not None else "fields"]
        return data


class EventDataOutput(OutputSerializer):
    """What an event says, by type: `ask.closed` (`ask` with its result, `status`, `reason`),
    `ask.progress` (`ask`, `received` of `total` respondents), `session.cancel_requested`
    (`session`, `by`)."""

    ask = AskOutput(required=False)
    session = SessionRefOutput(required=False)
    status = serializers.ChoiceField(choices=Ask.Status.choices, required=False)
    reason = serializers.ChoiceField(choices=Ask.Reason.choices, required=False)
    received = serializers.IntegerField(required=False)
    total = serializers.IntegerField(required=False)
    by = serializers.CharField(required=False, help_text="Who cancelled the session's task")

    def to_representation(self, event: OutboxEvent):
        # What the transition recorded: a declared key it lacks is left out, an undeclared one is
        # not sent (declare it here, and the schema documents it).
        about: dict[str, Any] = dict(event.data)
        if event.ask_id is not None:
            about["ask"] = event.ask
        if event.session_id is not None:
            about["session"] = event.session
        return super().to_representation(about)


class EventOutput(OutputSerializer):
    """An event: one item of the /events feed, and the body of its webhook."""

    seq = serializers.IntegerField()
    type = serializers.ChoiceField(choices=OutboxEvent.Type.choices)
    created_at = IsoDateTime()
    data = EventDataOutput(source="*")  # type: ignore[assignment]  # a declared field: see OutputSerializer


def ask_data(ask: Ask) -> dict[str, Any]:
    """The public shape of an ask (``AskOutput``)."""
    return AskOutput.of(ask)


def event_data(event: OutboxEvent) -> dict[str, Any]:
    """The public shape of an event (``EventOutput``): a feed item and a webhook body."""
    return EventOutput.of(event)


def events_after(*, agent: Agent, after: int, limit: int = 100) -> list[OutboxEvent]:
    return list(
        OutboxEvent.objects.filter(agent=agent, seq__gt=after)
        .select_related("ask__session", "session")
        .prefetch_related("ask__respondents")
        .order_by("seq")[:limit]
    )


# ------------------------------------------------------------------------------------ metrics
# What /metrics reports from the database (askcards.metrics): every process answers the same,
# because the figures are read at scrape time from the rows that hold the truth. Each is one
# grouped query; none reads an answer or a secret.


# Above this many rows (PostgreSQL's estimate) a table's admin list counts at most
# COUNT_UP_TO rows exactly and estimates beyond.
EXACT_COUNT_BELOW = 50_000
COUNT_UP_TO = 1000


def changelist_count(queryset: QuerySet[Any]) -> int:
    """How many rows an admin list holds, without counting a large table row by row.

    SQLite, or a table PostgreSQL estimates below ``EXACT_COUNT_BELOW`` rows: an exact
    ``COUNT(*)``. Otherwise the rows are counted up to ``COUNT_UP_TO`` (a ``COUNT`` over a
    ``LIMIT``ed subquery, which stops there); a list that holds fewer is exact, which keeps the
    admin's "show all" and single-page decisions right (they would render every row of an
    underestimated list). Beyond that: the table's estimate (``pg_class``) when the list is
    unfiltered, else the planner's estimate of the filtered query (EXPLAIN, which reads no rows),
    and never less than what was counted."""
    estimate = statements.table_row_estimate(queryset.model)
    if estimate is None or estimate < EXACT_COUNT_BELOW:
        return queryset.count()
    # In the list's own order: the index that serves the page serves the count.
    counted = queryset.values("pk")[:COUNT_UP_TO].count()
    if counted < COUNT_UP_TO:
        return counted
    if queryset.query.where:
        plan = json.loads(queryset.order_by().values("pk").explain(format="json"))
        if isinstance(plan, list):  # the driver handed EXPLAIN's document over as text
            plan = plan[0]
        estimate = int(plan["Plan"]["Plan Rows"])
    return max(estimate, counted)


def metrics_asks() -> list[dict[str, Any]]:
    """Asks by tool, session platform, status and reason (open ones with reason "")."""
    rows = Ask.objects.order_by().values("tool", "session__platform", "status", "reason").annotate(count=models.Count("pk"))
    return [dict(row) for row in rows]


def metrics_pruned() -> dict[str, list[tuple[list[str], int]]]:
    """What retention deleted, by metric: (label values, count) to add to the database's own
    counts, so ``/metrics``' counters never go down (``models.PrunedTally``)."""
    tallies: dict[str, list[tuple[list[str], int]]] = {metric: [] for metric in PrunedTally.Metric.values}
    for metric, labels, count in PrunedTally.objects.values_list("metric", "labels", "count"):
        tallies.setdefault(metric, []).append((labels.split("|"), count))
    return tallies


def metrics_answer_times(bounds: tuple[float, ...]) -> list[dict[str, Any]]:
    """Answered asks by tool: how many took at most each of ``bounds`` seconds from being shown
    (activated) to being answered (``le_<i>``), their ``count`` and the total (``seconds``)."""
    taken = statements.SecondsBetween(models.F("closed_at"), Coalesce("activated_at", "created_at"))
    buckets = {f"le_{index}": models.Count("pk", filter=models.Q(taken__lte=bound)) for index, bound in enumerate(bounds)}
    rows = (
        Ask.objects.filter(status=Ask.Status.ANSWERED, closed_at__isnull=False)
        .order_by()
        .annotate(taken=taken)
        .values("tool")
        .annotate(count=models.Count("pk"), total=models.Sum("taken"), **buckets)
    )
    return [{**row, "seconds": row["total"] or 0.0} for row in rows]


def metrics_responses() -> list[dict[str, Any]]:
    """People's answers by tool, the surface they answered on and their status."""
    rows = (
        Respondent.objects.exclude(surface="").order_by().values("ask__tool", "surface", "status")
        .annotate(count=models.Count("pk"))
    )
    return [dict(row) for row in rows]


def metrics_ignored_clicks() -> dict[tuple[str, str], int]:
    """Clicks that changed nothing (audit rows of kind ``ignored`` from a surface), by surface and
    cause: the part of the recorded attempt before "/" (``late/answered`` counts as ``late``)."""
    rows = (
        AskEvent.objects.filter(kind=AskEvent.Kind.IGNORED)
        .exclude(surface="")
        .order_by()
        .values("surface", "detail__attempted")
        .annotate(count=models.Count("pk"))
    )
    counted: dict[tuple[str, str], int] = {}
    for row in rows:
        cause = str(row["detail__attempted"] or "unknown").split("/", 1)[0]
        key = (row["surface"], cause)
        counted[key] = counted.get(key, 0) + row["count"]
    return counted


def metrics_card_sync() -> list[dict[str, Any]]:
    """Card messages behind their desired state, by platform: all of them (``backlog``) and those
    whose last push failed (``failing``, a retry pending)."""
    rows = (
        CardMessage.objects.filter(version__gt=models.F("synced_version"))
        .order_by()
        .values("platform")
        .annotate(backlog=models.Count("pk"), failing=models.Count("pk", filter=models.Q(sync_attempts__gt=0)))
    )
    return [dict(row) for row in rows]


def metrics_outbox(now: datetime) -> dict[str, Any]:
    """Webhook deliveries: delivered, given up, attempts made, and the backlog (events of agents
    with a webhook URL, neither delivered nor given up) with the age of its oldest event."""
    webhooks = OutboxEvent.objects.order_by()
    done = webhooks.aggregate(
        delivered=models.Count("pk", filter=models.Q(delivered_via="webhook")),
        given_up=models.Count("pk", filter=models.Q(failed_at__isnull=False)),
        attempts=models.Sum("attempts"),
    )
    waiting = webhooks.filter(delivered_at__isnull=True, failed_at__isnull=True).exclude(agent__webhook_url="")
    backlog = waiting.aggregate(count=models.Count("pk"), oldest=models.Min("created_at"))
    oldest = backlog["oldest"]
    return {
        "delivered": done["delivered"],
        "given_up": done["given_up"],
        "attempts": done["attempts"] or 0,
        "backlog": backlog["count"],
        "oldest_seconds": max((now - oldest).total_seconds(), 0.0) if oldest is not None else 0.0,
    }


def metrics_panel_sockets(now: datetime) -> int:
    """Connected panel sockets of every process: presence rows still fresh at ``now``."""
    return PanelPresence.objects.filter(last_seen__gte=now - PanelPresence.TTL).count()


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
    planner chose the status index); 2000 sockets' catch-ups took both cores."""
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
