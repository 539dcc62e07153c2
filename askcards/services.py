"""Every write and lifecycle transition (SPEC §5).

Each transition is one conditional UPDATE (``… WHERE status IN expected``): the caller that
changes the row wins, every other caller gets ``False`` / a "lost" outcome and changes nothing
but its own audit row. Audit rows and outbox events are written in the same transaction; surface
updates and wake-ups run from ``transaction.on_commit``, never inside the transaction.
"""
from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, models, transaction
from django.db.models import F
from django.utils import timezone

from . import crypto, events, jsonlimits, netguard, outbox, selectors, surfaces, tools
from .db import append_row
from .errors import InvalidInput, UnknownTool, WebUserNotGranted
from .models import Agent, Ask, AskEvent, Bot, CallbackReceipt, CardMessage, OutboxEvent, ProgressCard, Respondent, Session
from .tools import ask_user_questions
from .tools import dingtalk_ask_user_question as dingtalk_tool

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 15 * 60
MAX_TIMEOUT_SECONDS = 13 * 24 * 3600  # Feishu cards stop working after 14 days
SYSTEM = "system"

# Key patterns of the Feishu seed (§4.1): private chats and group workspaces.
FEISHU_PRIVATE_KEY = re.compile(r"^feishu-(?P<bot>[^-/]+)-private-(?P<user>.+)$")
FEISHU_GROUP_MARKER = "/feishu-chat/"


# ---------------------------------------------------------------------------------------- sessions


def infer_platform(key: str) -> tuple[str, str] | None:
    """(platform, chat_type) from a session key, as the Feishu seed names its sessions."""
    if FEISHU_PRIVATE_KEY.match(key):
        return Session.Platform.FEISHU, Session.ChatType.P2P
    if FEISHU_GROUP_MARKER in key:
        return Session.Platform.FEISHU, Session.ChatType.GROUP
    return None


def session_upsert(
    *,
    agent: Agent,
    key: str,
    platform: str | None = None,
    chat_type: str | None = None,
    bot: Bot | None = None,
    parent: Session | None = None,
    **fields: str,
) -> tuple[Session, bool]:
    """Create the session of ``key`` or update the fields given. Returns (session, created).

    Raises WebUserNotGranted (and writes nothing) when ``web_user`` names a user the agent was
    not granted.
    """
    inferred = infer_platform(key)
    if platform is None and inferred:
        platform, chat_type = inferred[0], chat_type or inferred[1]
    if inferred is None and platform is None:
        existing = Session.objects.filter(agent=agent, key=key).first()
        if existing is None:
            raise InvalidInput(
                f"cannot infer the platform of session key {key!r}: give platform "
                "(feishu, dingtalk, wechat or web), or use a key like feishu-<botId>-private-<userId>"
            )
    # The Feishu seed's private key names the user; a session explicitly on another platform
    # (say web, keyed like a Feishu chat) does not take its user from the key.
    if inferred and platform == inferred[0] and not fields.get("user_id") and inferred[1] == Session.ChatType.P2P:
        match = FEISHU_PRIVATE_KEY.match(key)
        fields["user_id"] = match.group("user") if match else ""
        limit = Session._meta.get_field("user_id").max_length
        if len(fields["user_id"]) > limit:
            raise InvalidInput(f"the user_id in session key {key[:40]!r}… is longer than {limit} characters; give user_id")
    if parent is not None and parent.agent_id != agent.id:
        raise InvalidInput("parent must be a session of this agent")
    session_check_web_user(agent=agent, web_user=fields.get("web_user") or "")
    values: dict[str, Any] = {name: value for name, value in fields.items() if value is not None}
    if platform is not None:
        values["platform"] = platform
    if chat_type is not None:
        values["chat_type"] = chat_type
    if bot is not None:
        values["bot"] = bot
    if parent is not None:
        values["parent"] = parent
    existing = Session.objects.filter(agent=agent, key=key).first()
    if existing is not None and _unchanged(existing, values):
        # Clients that name their session on every request (MCP URLs) mostly repeat it: no write.
        return existing, False
    try:
        with transaction.atomic():
            session, created = Session.objects.update_or_create(agent=agent, key=key, defaults=values)
    except IntegrityError:
        # Two upserts of one key raced; the loser updates the winner's row.
        session = Session.objects.get(agent=agent, key=key)
        for name, value in values.items():
            setattr(session, name, value)
        session.save()
        created = False
    return session, created


def _unchanged(session: Session, values: dict[str, Any]) -> bool:
    for name, value in values.items():
        if isinstance(value, models.Model):
            if getattr(session, f"{name}_id") != value.pk:
                return False
        elif getattr(session, name) != value:
            return False
    return True


def session_bot(*, app_id: str, platform: str | None, key: str) -> Bot:
    """The active bot a session names by its ``app_id`` / ``client_id``, on the session's platform
    (given, or inferred from ``key``); InvalidInput when there is none."""
    platform = platform or (infer_platform(key) or (None,))[0]
    bots = Bot.objects.filter(app_id=app_id, is_active=True)
    if platform in Bot.Platform.values:
        bots = bots.filter(platform=platform)
    bot = bots.first()
    if bot is None:
        raise InvalidInput(f"no active bot with app_id/client_id {app_id!r}; add it with askcards_bot")
    return bot


def session_check_web_user(*, agent: Agent, web_user: str) -> None:
    """Raise WebUserNotGranted unless ``web_user`` is blank or a user an operator granted ``agent``.

    An unknown username gets the very same answer as a known one not granted, so an agent
    cannot find out which usernames exist.
    """
    if web_user and not selectors.web_user_granted(agent=agent, web_user=web_user):
        command = shlex.join(["python", "manage.py", "askcards_agent", "grant", agent.name, web_user])
        raise WebUserNotGranted(
            f"agent {agent.name!r} may not ask web user {web_user!r}: it was not granted that user. "
            f"An operator grants it with `{command}` (or on the agent's admin page); "
            "otherwise leave web_user empty."
        )


# ------------------------------------------------------------------------------------- tool calls


@dataclass
class ToolCallOutcome:
    status: str  # pending | answered | cancelled | expired | invalidated | failed | ok
    tool_result: str | None
    ask: Ask | None
    created: bool


def tool_call(
    *,
    agent: Agent,
    session: Session,
    name: str,
    arguments: Any,
    call_id: str | None = None,
    sender_id: str = "",
    timeout_seconds: int | None = None,
) -> ToolCallOutcome:
    """Run a model's tool call: validate, reserve, deliver, activate (or fail at once).

    Raises UnknownTool for a name no session has, and WebUserNotGranted when the session's
    web_user is no longer granted to the agent (revoked after the session was made; asks already
    pending stay, and a retry of an earlier call_id still returns its ask). Everything else is a
    tool-level outcome the model must see: invalid arguments, a tool this session lacks, no
    surface to ask on.
    """
    tool = tools.get(name)
    if tool is None:
        raise UnknownTool(f"unknown tool {name!r}; expected one of: {', '.join(sorted(tools.REGISTRY))}")
    if call_id:
        existing = Ask.objects.filter(agent=agent, call_id=call_id).select_related("session").first()
        if existing is not None:
            return _existing_outcome(existing, session, name)
    session_check_web_user(agent=agent, web_user=session.web_user)
    if name == dingtalk_tool.NAME:
        return dingtalk_tool_call(agent=agent, session=session, arguments=arguments, call_id=call_id, sender_id=sender_id)
    if timeout_seconds is not None and not 1 <= timeout_seconds <= MAX_TIMEOUT_SECONDS:
        raise InvalidInput(f"timeout_seconds must be from 1 to {MAX_TIMEOUT_SECONDS}, got {timeout_seconds}")

    available = [t.name for t in tools.tools_for(platform=session.platform, is_subagent=session.is_subagent)]
    try:
        normalised = tools.validate(tool, arguments)
        _reject_nul(arguments, "arguments")
    except tools.ToolInputError as exc:
        return ToolCallOutcome("failed", tools.error_result("invalid_arguments", str(exc)), None, False)

    owner = sender_id or session.user_id or session.web_user
    _check_respondent_id(owner)
    now = timezone.now()
    ask = Ask(
        agent=agent,
        session=session,
        tool=name,
        call_id=call_id or None,
        sender_id=owner,
        blocking=tool.blocking,
        title=normalised.title,
        description=normalised.description,
        questions=normalised.questions,
        fields=normalised.fields,
        deadline=now + timedelta(seconds=timeout_seconds or DEFAULT_TIMEOUT_SECONDS),
        created_at=now,
    )
    if name not in available:
        failure = Ask.Reason.NOT_AVAILABLE
        shown_on: list[Any] = []
    else:
        shown_on = surfaces.reachable_surfaces(session, name)
        failure = None if shown_on else Ask.Reason.NO_SURFACE
    ask.surfaces = [surface.name for surface in shown_on]
    existing = _reserve(ask, [owner])
    if existing is not None:
        return existing

    if failure is not None:
        _close(ask, Ask.OPEN, Ask.Status.FAILED, failure, SYSTEM)
        return _outcome(ask, created=True)

    if _deliver(ask, shown_on):
        ask_activate(ask=ask)
    return _outcome(ask, created=True)


def _check_respondent_id(owner: str) -> None:
    key_limit = Respondent._meta.get_field("respondent_key").max_length
    if len(owner.casefold()) > key_limit:
        raise InvalidInput(
            f"sender_id (else the session's user_id) {owner[:40]!r}… is too long: "
            f"at most {key_limit} characters once case-folded"
        )


def _reserve(ask: Ask, respondent_ids: list[str]) -> ToolCallOutcome | None:
    """Insert the new ask (reserved), its respondents and its "created" audit row in one
    transaction. When a concurrent retry with the same call_id won the insert, its outcome."""
    try:
        with transaction.atomic():
            ask.save(force_insert=True)
            Respondent.objects.bulk_create(
                Respondent(ask=ask, respondent_id=rid, respondent_key=rid.casefold(), position=index)
                for index, rid in enumerate(respondent_ids)
            )
            _audit(ask, AskEvent.Kind.CREATED, "", Ask.Status.RESERVED, f"agent:{ask.agent.name}", detail={"tool": ask.tool})
    except IntegrityError:
        existing = Ask.objects.select_related("session").get(agent=ask.agent, call_id=ask.call_id)
        return _existing_outcome(existing, ask.session, ask.tool)
    return None


def _deliver(ask: Ask, shown_on: list[Any], failure_result=None) -> bool:
    """Let every surface deliver the reserved ask; on the first failure the ask fails with
    ``delivery_failed`` (``failure_result(exc)``, when given, is its result) and this is False."""
    for surface in shown_on:
        try:
            surface.deliver(ask)
        except surfaces.DeliveryFailed as exc:
            logger.warning("delivery of ask %s to %s failed: %s", ask.id, surface.name, exc)
            result = failure_result(exc) if failure_result else None
            _close(ask, Ask.OPEN, Ask.Status.FAILED, Ask.Reason.DELIVERY_FAILED, SYSTEM, result=result,
                   detail={"error": str(exc)[:300]})
            return False
    return True


def _reject_nul(value: Any, path: str) -> None:
    """The text rule of every entry (``jsonlimits.check_text``: no NUL, no lone surrogate, keys
    too), for callers that hand over decoded values; the API's parser refuses such bodies first."""
    try:
        jsonlimits.check_text(value, path)
    except jsonlimits.JSONRefused as exc:
        raise tools.ToolInputError(str(exc)) from None


def _existing_outcome(ask: Ask, session: Session, name: str) -> ToolCallOutcome:
    if ask.session_id != session.id or ask.tool != name:
        raise InvalidInput(f"call_id was already used for another call (ask {ask.id}); use a new call_id")
    return _outcome(ask, created=False)


def _outcome(ask: Ask, *, created: bool) -> ToolCallOutcome:
    ask.refresh_from_db()
    result = ask.result or {}
    return ToolCallOutcome(ask.status, result.get("tool_result"), ask, created)


def ask_activate(*, ask: Ask) -> bool:
    """reserved → pending once every surface has it; the surfaces then show it (after commit)."""
    now = timezone.now()
    with transaction.atomic():
        won = Ask.objects.filter(pk=ask.pk, status=Ask.Status.RESERVED).update(
            status=Ask.Status.PENDING, activated_at=now
        )
        if not won:
            _audit_ignored(ask, "activate", SYSTEM, "")
            return False
        ask.status, ask.activated_at = Ask.Status.PENDING, now
        _audit(ask, AskEvent.Kind.ACTIVATED, Ask.Status.RESERVED, Ask.Status.PENDING, SYSTEM)
        surfaces.mark_changed(ask)
        transaction.on_commit(partial(_after_change, ask, "show"))
    return True


# -------------------------------------------------------------------------------------- answers


@dataclass
class AnswerOutcome:
    accepted: bool
    ask: Ask
    error: str = ""  # why it was not accepted: "not_pending", "not_respondent", "invalid"


def ask_answer(
    *,
    ask_id: str,
    answers: Any,
    surface: str,
    respondent_id: str | None = None,
    ask: Ask | None = None,
) -> AnswerOutcome:
    """A person answered on a surface. The first valid answer wins; later ones change nothing.

    ``answers`` is the seed's list of ``{question, selectedLabels, customInput}``. Invalid answers
    raise nothing: they return ``accepted=False, error="invalid: …"`` so surfaces can tell the person.
    ``respondent_id`` (when given) must be the ask's owner; surfaces that authorise otherwise
    (a logged-in panel user) pass None. ``ask`` (optional) is the row the caller just read, with
    ``session`` loaded; only its id and unchanging fields are relied on.
    """
    if ask is None or ask.pk != ask_id:  # a caller that just read the ask may hand it over
        ask = Ask.objects.select_related("session").get(pk=ask_id)
    if ask.tool == dingtalk_tool.NAME:
        # A DingTalk form has its own answer shape and lifecycle (dingtalk_click), only on its card.
        return AnswerOutcome(False, ask, "invalid: this ask is answered on its DingTalk card")
    actor = f"respondent:{respondent_id or ask.sender_id}"
    # An ask_user_questions ask has one respondent, its owner (tool_call keys it by sender_id).
    owner_key = ask.sender_id.casefold()
    if respondent_id is not None and respondent_id.casefold() != owner_key:
        _audit_ignored(ask, "not_respondent", actor, surface)
        return AnswerOutcome(False, ask, "not_respondent")
    try:
        jsonlimits.check_text(answers, "answers")  # every surface's answers: the panel's, Feishu's
        normalised = ask_user_questions.normalise_answers(ask.questions or [], answers)
    except ValueError as exc:  # JSONRefused too
        return AnswerOutcome(False, ask, f"invalid: {exc}")
    tool = tools.get(ask.tool)
    result = tool.answers_result(ask.questions or [], normalised) if tool else {"answers": normalised}
    result["tool_result"] = tools.dumps({"answers": normalised})
    won = _close(
        ask,
        (Ask.Status.PENDING,),
        Ask.Status.ANSWERED,
        Ask.Reason.SUBMITTED,
        actor,
        surface=surface,
        result=result,
        respondent=(owner_key, Respondent.Status.SUBMITTED, normalised),
    )
    if not won:
        return AnswerOutcome(False, ask, "not_pending")
    return AnswerOutcome(True, ask)


# ------------------------------------------------------------------------------- progress cards


def progress_put(
    *,
    session: Session,
    status: str,
    title: str | None = None,
    content: str | None = None,
    sender_id: str = "",
    detail_url: str | None = None,
    reply_to: str = "",
) -> ProgressCard:
    """The agent reports its task's progress on the session's Feishu card (SPEC §6.1).

    The first report of a run creates the card (sent by the worker's card sync), later ones
    schedule a re-render. A terminal status ends the run: the session's open asks are cancelled
    (``session_cancelled``) and the card renders without forms; the next ``running`` report starts
    a new card. While the person's cancel is pending, reports update the text but the card stays
    cancelled. ``None`` for title, content or detail_url keeps what the run's card shows.
    """
    if session.platform != Session.Platform.FEISHU:
        raise InvalidInput(f"progress cards are Feishu cards; session {session.id} is a {session.platform} session")
    if session.bot is None or session.bot.platform != Bot.Platform.FEISHU:
        raise InvalidInput(f"session {session.id} has no Feishu bot: set bot (the app_id of a Feishu bot) on the session")
    if status not in ProgressCard.Status.values:
        raise InvalidInput(f"status must be one of {', '.join(ProgressCard.Status.values)}, got {status!r}")
    owner = sender_id or session.user_id
    if not owner and session.chat_type == Session.ChatType.GROUP:
        raise InvalidInput("a group session's progress card needs sender_id (the person whose message the task answers)")
    with transaction.atomic():
        card = ProgressCard.objects.select_for_update().runs_of(session.pk).first()
        if card is None or (card.status in ProgressCard.TERMINAL and status not in ProgressCard.TERMINAL):
            card = ProgressCard.objects.create(
                session=session, status=status, title=title or "", content=content or "", sender_id=owner,
                detail_url=detail_url or "", reply_to=reply_to,
            )
            CardMessage.objects.create(
                platform=Bot.Platform.FEISHU, bot=session.bot, progress_card=card, message_id="", version=1
            )
        else:
            ended = status in ProgressCard.TERMINAL and card.status not in ProgressCard.TERMINAL
            card.status = status
            card.title = card.title if title is None else title
            card.content = card.content if content is None else content
            card.detail_url = card.detail_url if detail_url is None else detail_url
            card.sender_id = owner or card.sender_id
            card.save(update_fields=["status", "title", "content", "detail_url", "sender_id", "updated_at"])
            card_touch(card=card)
            if ended:
                _cancel_session_asks(session, actor=f"agent:{session.agent.name}")
    return card


def session_cancel_request(*, card: ProgressCard, actor: str) -> bool:
    """The person pressed the card's cancel button: end the asks, tell the agent, show cancelled.

    False when the card already ended or was already cancelled (a repeated click changes nothing).
    """
    with transaction.atomic():
        now = timezone.now()
        if not ProgressCard.objects.filter(
            pk=card.pk, cancel_requested_at__isnull=True, status__in=[ProgressCard.Status.RUNNING, ProgressCard.Status.RECOVERING]
        ).update(cancel_requested_at=now):
            return False
        card.cancel_requested_at = now
        session = card.session
        _cancel_session_asks(session, actor=actor)
        outbox.append(
            agent_id=session.agent_id,
            type=OutboxEvent.Type.SESSION_CANCEL_REQUESTED,
            session=session,
            data={"session": {"id": session.id, "key": session.key}, "by": actor},
        )
        card_touch(card=card)
    return True


def card_touch(*, card: ProgressCard) -> None:
    """The card's state changed: its message needs one more render (the worker's card sync)."""
    CardMessage.objects.filter(progress_card=card).update(version=F("version") + 1)


def card_delivery_failed(*, card: ProgressCard, error: str) -> int:
    """The progress card could not be sent: asks shown nowhere else fail with ``delivery_failed``."""
    asks = Ask.objects.filter(session=card.session, status__in=Ask.OPEN).select_related("session", "agent")
    return sum(
        _close(ask, Ask.OPEN, Ask.Status.FAILED, Ask.Reason.DELIVERY_FAILED, SYSTEM, detail={"error": error[:300]})
        for ask in asks
        if ask.surfaces == ["feishu"]
    )


def callback_receipt(*, platform: str, event_id: str) -> bool:
    """Record a platform callback's event id; False when it was handled before (a re-delivery).

    One ``INSERT … ON CONFLICT DO NOTHING`` (SQLite and PostgreSQL): no savepoint needed inside
    the caller's transaction, and a concurrent duplicate waits for the first and then inserts nothing.
    """
    table = CallbackReceipt._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f'INSERT INTO "{table}" ("platform", "event_id", "created_at") VALUES (%s, %s, %s) '
            'ON CONFLICT ("platform", "event_id") DO NOTHING',
            [platform, event_id[:200], connection.ops.adapt_datetimefield_value(timezone.now())],
        )
        return cursor.rowcount == 1


# How long a callback receipt is kept. Feishu re-delivers within minutes; a DingTalk signature
# pair stays acceptable for at most 2 × ASKCARDS_DINGTALK_CALLBACK_SKEW_SECONDS (≤ 2 h).
CALLBACK_RECEIPT_TTL = timedelta(days=1)


def callback_receipts_purge(*, now=None) -> int:
    cutoff = (now or timezone.now()) - CALLBACK_RECEIPT_TTL
    return CallbackReceipt.objects.filter(created_at__lt=cutoff).delete()[0]


def _cancel_session_asks(session: Session, *, actor: str) -> int:
    # Callers hold one transaction for all the asks. Closing the first takes the agent row's lock
    # (outbox.append) until commit, while a callback answering a later ask holds that ask's row and
    # waits for the agent row: locking the asks one by one as they closed deadlocked on PostgreSQL
    # (found by tests/scale/test_platform_races.py, the card's cancel button racing submits). So
    # every open ask is locked first, in id order, before the first close takes the agent row (the
    # progress card row the callers lock earlier is one no answer touches); asks answered meanwhile
    # drop out. SQLite ignores the lock: its IMMEDIATE transactions already serialise writers.
    asks = list(
        Ask.objects.filter(session=session, status__in=Ask.OPEN)
        .select_related("session", "agent")
        .order_by("pk")
        .select_for_update(of=("self",))
    )
    return sum(ask_cancel(ask=ask, reason=Ask.Reason.SESSION_CANCELLED, actor=actor) for ask in asks)


def ask_click_rejected(*, ask: Ask, why: str, actor: str, surface: str) -> None:
    """A click that changes nothing (late, wrong person, blank form) still leaves its audit row."""
    _audit_ignored(ask, why, actor, surface)


# ------------------------------------------------------------------------------- other endings


def ask_result_returned(*, ask: Ask) -> None:
    """A response just handed this terminal ask's result to its agent (REST or MCP): the result
    counts as delivered (its retention clock starts) and its ask.closed event needs no webhook."""
    if not ask.is_open and ask.result_delivered_at is None:
        outbox.result_returned(ask.id, timezone.now())


def events_acknowledge(*, agent: Agent, upto: int) -> int:
    """The agent read its event feed up to ``upto``: those events are delivered (and the results
    they carry start their retention clock)."""
    return outbox.acknowledge(agent=agent, upto=upto)


def events_retry(*, event_ids: list[int]) -> int:
    """Operator action: make failed or waiting webhook deliveries due at once."""
    return outbox.retry_now(event_ids)


def ask_cancel(*, ask: Ask, reason: str = Ask.Reason.BY_AGENT, actor: str) -> bool:
    """Cancel an open ask (agent, operator, respondent, session cancel). False if it was not open."""
    if reason not in Ask.REASONS[Ask.Status.CANCELLED]:
        raise InvalidInput(f"reason must be one of {', '.join(Ask.REASONS[Ask.Status.CANCELLED])}, got {reason!r}")
    return _close(ask, Ask.OPEN, Ask.Status.CANCELLED, reason, actor)


def ask_expire(*, ask: Ask, now=None) -> bool:
    """The deadline passed (worker only). False if the ask ended another way first."""
    now = now or timezone.now()
    if ask.deadline > now:
        return False
    return _close(ask, Ask.OPEN, Ask.Status.EXPIRED, Ask.Reason.TIMEOUT, SYSTEM, now=now)


def ask_invalidate(*, ask: Ask, reason: str, actor: str = SYSTEM) -> bool:
    if reason not in Ask.REASONS[Ask.Status.INVALIDATED]:
        raise InvalidInput(f"reason must be one of {', '.join(Ask.REASONS[Ask.Status.INVALIDATED])}")
    return _close(ask, Ask.OPEN, Ask.Status.INVALIDATED, reason, actor)


def session_message(*, session: Session, sender_id: str = "") -> int:
    """An ordinary inbound message arrived: it supersedes the sender's open, non-targeted asks.

    Blocking asks (ask_user_questions) are not touched: the seed treats a text reply as a new
    inbound message, not as an answer, and the model is still waiting for its tool result.
    """
    asks = Ask.objects.filter(
        session=session, status__in=Ask.OPEN, target_type=Ask.Target.NONE, blocking=False
    )
    if sender_id:
        asks = asks.filter(sender_id=sender_id)
    return sum(
        ask_invalidate(ask=ask, reason=Ask.Reason.SUPERSEDED_BY_MESSAGE, actor=f"respondent:{sender_id}")
        for ask in asks
    )


def session_recover(*, session: Session) -> int:
    """The agent restarted (SPEC §5.5): its open non-targeted asks lose their context."""
    asks = Ask.objects.filter(session=session, status__in=Ask.OPEN, target_type=Ask.Target.NONE)
    invalidated = sum(ask_invalidate(ask=ask, reason=Ask.Reason.RESTART, actor=f"agent:{session.agent.name}") for ask in asks)
    # The Feishu card of the interrupted run says "任务正在恢复执行", without forms.
    with transaction.atomic():
        card = ProgressCard.objects.select_for_update().runs_of(session.pk).first()
        if card is not None and card.status == ProgressCard.Status.RUNNING:
            card.status = ProgressCard.Status.RECOVERING
            card.save(update_fields=["status", "updated_at"])
            card_touch(card=card)
    return invalidated


def agent_recover(*, agent: Agent) -> int:
    return sum(session_recover(session=session) for session in Session.objects.filter(agent=agent).select_related("agent"))


def expire_due(*, now=None, limit: int = 200) -> int:
    """Worker step: expire open asks whose deadline passed (including while nothing ran).

    Several workers sweep the same due asks: each first claims the ask's row (``SKIP LOCKED`` on
    PostgreSQL; SQLite's IMMEDIATE transaction serialises) and moves on silently when another
    worker holds it or has closed it, so "ignored" audit rows stay for real attempts.
    """
    now = now or timezone.now()
    due = Ask.objects.filter(status__in=Ask.OPEN, deadline__lte=now).select_related("session", "agent")
    expired = 0
    for ask in due.order_by("deadline")[:limit]:
        with transaction.atomic():
            claim = Ask.objects.select_for_update(skip_locked=True).filter(pk=ask.pk, status__in=Ask.OPEN)
            if list(claim.values_list("pk", flat=True)):
                expired += ask_expire(ask=ask, now=now)
    return expired


def purge_answers(*, now=None) -> int:
    """Worker step: drop answer bodies N days after the result reached the agent (0 = at once)."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=settings.ASKCARDS_ANSWER_RETENTION_DAYS)
    purged = 0
    due = Ask.objects.filter(answers_purged_at__isnull=True, result_delivered_at__lte=cutoff).exclude(
        status__in=Ask.OPEN
    )
    for ask in due.order_by("result_delivered_at")[:500]:
        with transaction.atomic():
            if not Ask.objects.filter(pk=ask.pk, answers_purged_at__isnull=True).update(
                answers_purged_at=now, result=_purged_result(ask.result)
            ):
                continue
            Respondent.objects.filter(ask=ask).update(answers=None)
            _audit(ask, AskEvent.Kind.PURGED, ask.status, ask.status, SYSTEM)
            purged += 1
    return purged


def _purged_result(result: dict[str, Any] | None) -> dict[str, Any] | None:
    if result is None:
        return None
    kept = {
        key: value
        for key, value in result.items()
        if key not in {"answers", "responses", "collection", "tool_result", "message"}
    }
    kept["purged"] = True
    return kept


# ---------------------------------------------------------------------------------- the machine


def _close(
    ask: Ask,
    expected: tuple[str, ...],
    status: str,
    reason: str,
    actor: str,
    *,
    surface: str = "",
    result: dict[str, Any] | None = None,
    respondent: tuple[str, str, Any] | None = None,
    detail: dict[str, Any] | None = None,
    now=None,
) -> bool:
    """The one terminal transition: conditional UPDATE, audit row, result event, on-commit hooks."""
    now = now or timezone.now()
    # No savepoint when nested (a callback's transaction): nothing here is caught and retried.
    with transaction.atomic(savepoint=False):
        if len(expected) == 1:
            # The hot path (answers): the status it came from is known, no read needed.
            from_status = expected[0]
        else:
            # Lock and read the row first (no-op lock on SQLite, whose IMMEDIATE transactions
            # serialise writers) to know which open status the audit row should name.
            from_status = Ask.objects.select_for_update().filter(pk=ask.pk).values_list("status", flat=True).first()
        if result is None and ask.tool == dingtalk_tool.NAME:
            # Read inside the transaction: a targeted result holds the responses as they are now.
            result = _dingtalk_result(ask, status, reason) if from_status in expected else {}
        if result is None:
            result = {"tool_result": tools.error_result(reason)} if ask.blocking else {}
        won = from_status in expected and Ask.objects.filter(pk=ask.pk, status__in=expected).update(
            status=status, reason=reason, closed_at=now, result=result
        )
        if not won:
            _audit_ignored(ask, f"{status}/{reason}", actor, surface, current=None if len(expected) == 1 else from_status)
            return False
        ask.status, ask.reason, ask.closed_at, ask.result = status, reason, now, result
        if respondent is not None:
            key, row_status, answers = respondent  # the respondent_key of the person who answered
            Respondent.objects.filter(ask_id=ask.pk, respondent_key=key, status=Respondent.Status.PENDING).update(
                status=row_status, answers=answers, answered_at=now, surface=surface
            )
        if ask.target_type != Ask.Target.NONE:
            # A targeted collection ends: whoever has not responded is missing.
            Respondent.objects.filter(ask_id=ask.pk, status=Respondent.Status.PENDING).update(
                status=Respondent.Status.MISSING
            )
        _audit(ask, AskEvent.Kind.CLOSED, from_status, status, actor, surface, {"reason": reason, **(detail or {})})
        surfaces.mark_changed(ask)
        # Last: the event's sequence number locks the agent's row until commit, and every answer
        # to any of the agent's asks waits for that lock (seen in tests/bench as transactions
        # queueing on it while their threads waited for the GIL between statements).
        outbox.append(
            agent_id=ask.agent_id,
            type=OutboxEvent.Type.ASK_CLOSED,
            ask=ask,
            data={"status": status, "reason": reason},
        )
        transaction.on_commit(partial(_after_change, ask, "withdraw"))
    logger.info("ask %s %s→%s (%s) by %s via %s", ask.id, from_status, status, reason, actor.split(":")[0], surface or "-")
    return True


def _after_change(ask: Ask, hook: str) -> None:
    """After commit: wake the ask's long-polls and update its surfaces. ``ask`` holds the state
    just committed (the transition sets it in memory), so no re-read is needed."""
    events.wake(events.ask_group(ask.pk))
    surfaces.run_hook(hook, ask)


def _audit(
    ask: Ask,
    kind: str,
    from_status: str,
    to_status: str,
    actor: str,
    surface: str = "",
    detail: dict[str, Any] | None = None,
) -> None:
    append_row(
        AskEvent,
        ask_id=ask.pk,
        kind=kind,
        from_status=from_status,
        to_status=to_status,
        actor=actor,
        surface=surface,
        detail=detail or {},
    )


def _audit_ignored(ask: Ask, attempted: str, actor: str, surface: str, current: str | None = None) -> None:
    """A losing or rejected attempt leaves a trace and nothing else."""
    if current is None:
        current = Ask.objects.filter(pk=ask.pk).values_list("status", flat=True).first() or ""
    with transaction.atomic():
        _audit(ask, AskEvent.Kind.IGNORED, current, current, actor, surface, {"attempted": attempted})


# ------------------------------------------------------------------------------- agents and bots


def agent_webhook_url_check(*, url: str) -> str:
    """The webhook URL to store for an agent ("" for none); InvalidInput saying what is wrong.

    Every way of setting a webhook URL (command, admin, services) goes through here: http or
    https only, and a literal link-local/metadata address is refused, a loopback/private one
    unless ASKCARDS_WEBHOOK_ALLOW_PRIVATE=true. A hostname is checked again on every delivery,
    on the addresses it resolves to then (``netguard``)."""
    return netguard.check_url(url, allow_private=settings.ASKCARDS_WEBHOOK_ALLOW_PRIVATE)


def agent_create(
    *, name: str, webhook_url: str = "", web_users: Sequence[str] = (), actor: str = "operator"
) -> tuple[Agent, str]:
    """Create an agent granted ``web_users`` (see agent_grant); returns it and its API key, which
    is shown this once and stored hashed. InvalidInput (nothing created) for a blank or taken
    name, a refused webhook URL or an unknown username."""
    if not name.strip():
        raise InvalidInput("agent name must not be blank")
    _check_columns(Agent, name=name, webhook_url=webhook_url)
    webhook_url = agent_webhook_url_check(url=webhook_url)
    if Agent.objects.filter(name=name).exists():
        raise InvalidInput(f"an agent named {name!r} already exists")
    users = [_granted_user(username) for username in dict.fromkeys(web_users)]
    key = crypto.new_agent_key()
    with transaction.atomic():
        agent = Agent.objects.create(
            name=name,
            key_hash=crypto.hash_agent_key(key),
            key_hint=key[:10],
            webhook_url=webhook_url,
            webhook_secret=crypto.new_webhook_secret() if webhook_url else "",
        )
        agent.web_users.add(*users)
    for username in dict.fromkeys(web_users):
        logger.info("agent %s granted web user %s by %s", agent.name, username, actor)
    return agent, key


def _check_columns(model: type[models.Model], **values: str) -> None:
    """Raise InvalidInput unless each value fits its column on every database: at most the field's
    max_length (SQLite would store more, PostgreSQL refuses it mid-transaction) and no NUL or
    lone surrogate (a command line's undecodable bytes arrive as lone surrogates)."""
    for name, value in values.items():
        if not isinstance(value, str):
            continue
        try:
            jsonlimits.check_text(value, name)
        except jsonlimits.JSONRefused as exc:
            raise InvalidInput(str(exc)) from None
        field = next((f for f in model._meta.concrete_fields if f.name == name), None)
        limit = field.max_length if field is not None else None
        if limit is not None and len(value) > limit:
            raise InvalidInput(f"{model.__name__.lower()} {name} is longer than {limit} characters ({len(value)} given)")


def agent_rotate_key(*, agent: Agent) -> str:
    """Replace the agent's key; the old one stops working at once."""
    key = crypto.new_agent_key()
    Agent.objects.filter(pk=agent.pk).update(key_hash=crypto.hash_agent_key(key), key_hint=key[:10])
    agent.key_hash, agent.key_hint = crypto.hash_agent_key(key), key[:10]
    return key


def _granted_user(username: str):
    """The Django user an operator names in a grant; InvalidInput (saying so) when none has that name."""
    User = get_user_model()
    user = User._default_manager.filter(**{User.USERNAME_FIELD: username}).first()
    if user is None:
        raise InvalidInput(
            f"no Django user named {username!r}: create the user first "
            "(python manage.py createsuperuser, or Users in the admin)"
        )
    return user


def agent_grant(*, agent: Agent, username: str, actor: str) -> bool:
    """Let ``agent``'s sessions name the Django user ``username`` as their web_user (ask on that
    user's panel). Idempotent: False when the grant already existed. Raises InvalidInput for an
    unknown username (the operator's tools may say so; agents never see this)."""
    user = _granted_user(username)
    with transaction.atomic():
        if agent.web_users.filter(pk=user.pk).exists():
            return False
        agent.web_users.add(user)
    logger.info("agent %s granted web user %s by %s", agent.name, username, actor)
    return True


def agent_revoke(*, agent: Agent, username: str, actor: str) -> bool:
    """Withdraw a grant. Idempotent: False when there was none. Sessions that name the user keep
    it, and their asks already pending stay answerable on the panel; the agent's next session
    upsert or tool call naming the user is refused with WebUserNotGranted."""
    user = _granted_user(username)
    with transaction.atomic():
        if not agent.web_users.filter(pk=user.pk).exists():
            return False
        agent.web_users.remove(user)
    logger.info("agent %s lost its grant of web user %s, revoked by %s", agent.name, username, actor)
    return True


def agent_grants_set(*, agent: Agent, usernames: Sequence[str], actor: str) -> tuple[list[str], list[str]]:
    """Make ``usernames`` exactly the web users ``agent`` is granted, through agent_grant and
    agent_revoke. Returns the usernames (granted, revoked)."""
    wanted = dict.fromkeys(usernames)
    current = [user.get_username() for user in agent.web_users.all()]
    granted = [name for name in wanted if agent_grant(agent=agent, username=name, actor=actor)]
    revoked = [name for name in current if name not in wanted and agent_revoke(agent=agent, username=name, actor=actor)]
    return granted, revoked


BOT_BASE_URLS = {Bot.Platform.FEISHU: "https://open.feishu.cn", Bot.Platform.DINGTALK: "https://api.dingtalk.com"}


def bot_add(*, platform: str, app_id: str, app_secret: str, base_url: str = "", **secrets_and_options: str) -> Bot:
    """Register a Feishu or DingTalk app. Secrets are encrypted at rest."""
    if platform not in Bot.Platform.values:
        raise InvalidInput(f"platform must be feishu or dingtalk, got {platform!r}")
    if not app_id.strip() or not app_secret.strip():
        raise InvalidInput("app id and app secret must not be blank")
    _check_columns(Bot, app_id=app_id, app_secret=app_secret, base_url=base_url, **secrets_and_options)
    if Bot.objects.filter(platform=platform, app_id=app_id).exists():
        raise InvalidInput(f"a {platform} bot with id {app_id!r} already exists")
    bot = Bot(platform=platform, app_id=app_id, app_secret=app_secret, base_url=base_url or BOT_BASE_URLS[platform])
    for name, value in secrets_and_options.items():
        if value is not None:
            setattr(bot, name, value)
    bot.full_clean()
    bot.save()
    return bot


# ------------------------------------------------------------------- dingtalk_ask_user_question
# SPEC §4.2, reference/dingtalk-plugin.md §2, §7, §9, §10. Non-blocking: create returns at once;
# the outcome reaches the agent as the ask.closed event's ``message`` (a new user turn).

DINGTALK_DEFAULT_TIMEOUT = timedelta(minutes=dingtalk_tool.DEFAULT_TIMEOUT_MINUTES)
DINGTALK_SURFACE = "dingtalk"  # the surface name in audit rows and Respondent.surface


def _dingtalk_text(details: dict[str, Any]) -> str:
    return dingtalk_tool.tool_result_text(details)


def _dingtalk_failed(error: str, **ids: str) -> ToolCallOutcome:
    return ToolCallOutcome("failed", _dingtalk_text(dingtalk_tool.failed_details(error, **ids)), None, False)


def dingtalk_tool_call(
    *, agent: Agent, session: Session, arguments: Any, call_id: str | None = None, sender_id: str = ""
) -> ToolCallOutcome:
    """``dingtalk_ask_user_question``: create | list | cancel, with the reference's texts.

    Validation is the tool's own (reference order and error strings, then the published schema),
    not the generic schema-first one. ``list`` and ``cancel`` reach only the targeted collections
    this caller started in this conversation, by this agent (reference §10).
    """
    tool = dingtalk_tool.TOOL
    available = [t.name for t in tools.tools_for(platform=session.platform, is_subagent=session.is_subagent)]
    if tool.name not in available:
        return _dingtalk_failed(dingtalk_tool.NO_CONTEXT_ERROR)
    try:
        normalised = tool.normalise(arguments)
        _reject_nul(arguments, "arguments")
    except tools.ToolInputError as exc:
        return _dingtalk_failed(str(exc))
    owner = sender_id or session.user_id
    action = normalised.extra["action"]
    if action == "list":
        rows = [
            {
                "question_id": ask.id,
                "title": ask.title,
                "deadline": ask.deadline,
                "received": sum(r.status != Respondent.Status.PENDING for r in ask.respondents.all()),
                "total": len(ask.respondents.all()),
            }
            for ask in _dingtalk_owned_collections(agent, session, owner)
        ]
        return ToolCallOutcome("ok", _dingtalk_text(dingtalk_tool.list_details(rows)), None, False)
    if action == "cancel":
        return _dingtalk_cancel(agent, session, owner, normalised.extra["questionId"])
    return _dingtalk_create(agent, session, owner, normalised, call_id)


def _dingtalk_owned_collections(agent: Agent, session: Session, owner: str):
    asks = (
        Ask.objects.filter(
            agent=agent,
            session=session,
            tool=dingtalk_tool.NAME,
            status=Ask.Status.PENDING,
            deadline__gt=timezone.now(),
        )
        .exclude(target_type=Ask.Target.NONE)
        .prefetch_related("respondents")
        .order_by("created_at", "id")
    )
    return [ask for ask in asks if owner and ask.sender_id.casefold() == owner.casefold()]


def _dingtalk_cancel(agent: Agent, session: Session, owner: str, question_id: str) -> ToolCallOutcome:
    owned = {ask.id: ask for ask in _dingtalk_owned_collections(agent, session, owner)}
    ask = owned.get(question_id)
    if ask is None or not ask_cancel(ask=ask, reason=Ask.Reason.BY_AGENT, actor=f"agent:{agent.name}"):
        return _dingtalk_failed(dingtalk_tool.CANCEL_NOT_ALLOWED_ERROR)
    # The partial results go back in this tool result, not as a message (reference §10).
    outbox.result_returned(ask.id, timezone.now())
    text = _dingtalk_text(dingtalk_tool.cancel_details(ask.result["collection"]))
    return ToolCallOutcome("cancelled", text, None, False)


def _dingtalk_create(agent: Agent, session: Session, owner: str, normalised, call_id: str | None) -> ToolCallOutcome:
    extra = normalised.extra
    target = extra.get("target")
    title_limit = Ask._meta.get_field("title").max_length
    if len(normalised.title) > title_limit:
        return _dingtalk_failed(
            f"arguments: the card title (title, else the first field label or question header) is "
            f"{len(normalised.title)} characters; at most {title_limit} fit"
        )
    now = timezone.now()
    timeout = timedelta(minutes=extra["timeoutMinutes"]) if extra.get("timeoutMinutes") else DINGTALK_DEFAULT_TIMEOUT
    respondent_ids = list(target["respondentUserIds"]) if target else [owner]
    _check_respondent_id(owner)
    bot_id = session.bot.app_id if session.bot else ""
    ask = Ask(
        agent=agent,
        session=session,
        tool=dingtalk_tool.NAME,
        call_id=call_id or None,
        sender_id=owner,
        blocking=False,
        title=normalised.title,
        description=normalised.description,
        questions=normalised.questions,
        fields=normalised.fields,
        target_type=target["type"] if target else Ask.Target.NONE,
        target_id=target["id"] if target else "",
        scope_key=f"{bot_id}:{session.key}:{owner}"[:800],
        deadline=now + timeout,
        created_at=now,
    )
    shown_on = surfaces.reachable_surfaces(session, dingtalk_tool.NAME)
    ask.surfaces = [surface.name for surface in shown_on]
    existing = _reserve(ask, respondent_ids)
    if existing is not None:
        return existing

    if not shown_on:
        text = _dingtalk_text(dingtalk_tool.failed_details(dingtalk_tool.NO_CONTEXT_ERROR, question_id=ask.id))
        _close(ask, Ask.OPEN, Ask.Status.FAILED, Ask.Reason.NO_SURFACE, SYSTEM, result={"tool_result": text})
        return _outcome(ask, created=True)
    if not _deliver(ask, shown_on, lambda exc: {"tool_result": _dingtalk_text(dingtalk_tool.failed_details(str(exc)))}):
        return _outcome(ask, created=True)
    out_track_id = (
        CardMessage.objects.filter(ask=ask, platform=Bot.Platform.DINGTALK).values_list("message_id", flat=True).first()
        or ""
    )
    targeted = target is not None
    pending = dingtalk_tool.pending_details(
        question_id=ask.id,
        out_track_id=out_track_id,
        deadline=ask.deadline if targeted else None,
        timeout_minutes=extra.get("timeoutMinutes") if targeted else None,
    )
    # Written before activation, so whoever ends the ask later keeps it in the result.
    Ask.objects.filter(pk=ask.pk, status=Ask.Status.RESERVED).update(result={"tool_result": _dingtalk_text(pending)})
    if not ask_activate(ask=ask):
        # A newer message (or anything else) ended it while the card was being delivered; the
        # card already shows why (its withdraw ran), the model reads the reference's error.
        lost = _dingtalk_text(
            dingtalk_tool.failed_details(
                dingtalk_tool.ACTIVATION_LOST_ERROR, question_id=ask.id, out_track_id=out_track_id
            )
        )
        Ask.objects.filter(pk=ask.pk).update(result={**(_current_result(ask) or {}), "tool_result": lost})
        outcome = _outcome(ask, created=True)
        outcome.status = "failed"
        return outcome
    if not targeted:
        # The person gets the full five minutes from when the card is live (reference §7).
        Ask.objects.filter(pk=ask.pk, status=Ask.Status.PENDING).update(
            deadline=ask.activated_at + DINGTALK_DEFAULT_TIMEOUT
        )
        # The new card only replaces older ones of the same person and conversation once delivered.
        older = Ask.objects.filter(
            scope_key=ask.scope_key, tool=dingtalk_tool.NAME, target_type=Ask.Target.NONE, status__in=Ask.OPEN
        ).exclude(pk=ask.pk).select_related("session", "agent")
        for other in older:
            ask_invalidate(ask=other, reason=Ask.Reason.SUPERSEDED_BY_QUESTION)
    return _outcome(ask, created=True)


def _current_result(ask: Ask) -> dict[str, Any] | None:
    return Ask.objects.filter(pk=ask.pk).values_list("result", flat=True).first()


def _dingtalk_responses(ask: Ask) -> list[dict[str, Any]]:
    rows = Respondent.objects.filter(ask_id=ask.pk).order_by("position")
    responses = []
    for row in rows:
        status = row.status if row.status != Respondent.Status.PENDING else Respondent.Status.MISSING
        answers = (row.answers or {}).get("answers", []) if status == Respondent.Status.SUBMITTED else []
        responses.append({"respondent_user_id": row.respondent_id, "status": status, "answers": list(answers)})
    return responses


def _dingtalk_result(ask: Ask, status: str, reason: str) -> dict[str, Any]:
    """The result of a DingTalk ask ending with ``reason``: the responses, and the ``message`` the
    agent injects as a new user turn (reference §9) when the ending has one. The create call's
    ``tool_result`` is kept, so a retried call (same call_id) reads what the model read."""
    result: dict[str, Any] = {}
    kept = (_current_result(ask) or {}).get("tool_result")
    if kept:
        result["tool_result"] = kept
    responses = _dingtalk_responses(ask)
    result["responses"] = responses
    if ask.target_type == Ask.Target.NONE:
        first = responses[0] if responses else {"answers": []}
        message = dingtalk_tool.answer_message(
            reason=reason, question_id=ask.id, title=ask.title, answers=first["answers"]
        )
        if message is not None:
            result["message"] = message
        return result
    overall = dingtalk_tool.COLLECTION_STATUS.get(reason)
    if overall is None:
        return result
    collection = dingtalk_tool.collection_result(
        question_id=ask.id,
        title=ask.title,
        status=overall,
        target={"type": ask.target_type, "id": ask.target_id},
        responses=responses,
    )
    result["collection"] = collection
    if reason != Ask.Reason.BY_AGENT:
        # The initiator's own cancel returns the partial results in its tool result instead.
        result["message"] = dingtalk_tool.collection_message(collection)
    return result


@dataclass
class ClickResult:
    """What a DingTalk card click did. ``kind``: recorded | duplicate | rejected; ``notice`` says
    why a click did not count; ``respondent`` is the clicker's row once they have responded."""

    kind: str
    ask: Ask
    notice: str = ""
    respondent: Respondent | None = None


def dingtalk_click(*, ask: Ask, user_id: str, action: str, form: dict[str, Any]) -> ClickResult:
    """A submit or cancel on an ask's DingTalk card (``action``: ``submit`` | ``cancel``).

    Ordinary cards: only the asker may answer; the first submit, empty submit or cancel ends the
    ask (one conditional UPDATE, racing new messages, the deadline and cancels cleanly). Targeted
    collections: only listed respondents (case-insensitive; a click naming nobody is refused);
    each one's first response is recorded and later ones ignored; the ask ends, with the
    collection's result, when the last one responds. A repeat of a recorded response is
    ``duplicate`` and changes nothing but an audit row.
    """
    actor = f"respondent:{user_id or '?'}"
    respondents = list(ask.respondents.all())
    clicker = next((r for r in respondents if user_id and r.respondent_key == user_id.strip().casefold()), None)
    if clicker is None:
        if not user_id.strip():
            notice = dingtalk_tool.NOTICE_NO_IDENTITY
        elif ask.target_type == Ask.Target.NONE:
            notice = dingtalk_tool.NOTICE_NOT_OWNER
        else:
            notice = dingtalk_tool.NOTICE_NOT_RESPONDENT
        _audit_ignored(ask, "not_respondent", actor, DINGTALK_SURFACE)
        return ClickResult("rejected", ask, notice)

    problem = dingtalk_tool.submission_problem(ask.fields or [], form) if action == "submit" else ""
    if problem and ask.status == Ask.Status.PENDING and clicker.status == Respondent.Status.PENDING:
        # Not something the card sends (a forged or garbled submit): refused, the ask stays open
        # for a real answer. A closed ask or a respondent who already responded is answered as
        # such below, whatever was sent.
        logger.warning("dingtalk submit for ask %s refused: %s", ask.id, problem)
        _audit_ignored(ask, "invalid", actor, DINGTALK_SURFACE)
        return ClickResult("rejected", ask, dingtalk_tool.NOTICE_INVALID)

    submission = dingtalk_tool.read_submission(ask.fields or [], form) if action == "submit" else None
    if action == "cancel":
        row_status, answers = Respondent.Status.CANCELLED, None
    elif submission.empty:
        row_status, answers = Respondent.Status.EMPTY, {"answers": [], "values": []}
    else:
        row_status, answers = Respondent.Status.SUBMITTED, {"answers": submission.answers, "values": submission.values}

    if ask.target_type == Ask.Target.NONE:
        if ask.is_open and ask.deadline <= timezone.now():
            # Past its deadline before the sweep got to it: the deadline wins, as it would have.
            ask_expire(ask=ask)
            _audit_ignored(ask, f"late/{row_status}", actor, DINGTALK_SURFACE)
            ask.refresh_from_db()
            return ClickResult("rejected", ask, dingtalk_tool.NOTICE_CLOSED)
        reasons = {Respondent.Status.CANCELLED: Ask.Reason.BY_RESPONDENT, Respondent.Status.EMPTY: Ask.Reason.EMPTY}
        reason = reasons.get(row_status, Ask.Reason.SUBMITTED)
        status = Ask.Status.CANCELLED if action == "cancel" else Ask.Status.ANSWERED
        won = _close(ask, (Ask.Status.PENDING,), status, reason, actor, surface=DINGTALK_SURFACE,
                     respondent=(clicker.respondent_key, row_status, answers),
                     result=_dingtalk_click_result(ask, reason, clicker, row_status, answers))
        return _click_outcome(ask, clicker, row_status, answers, won)

    now = timezone.now()
    with transaction.atomic():
        # Lock the ask (PostgreSQL; SQLite's IMMEDIATE transaction serialises writers): the
        # deadline sweep, a cancel and the other respondents wait until this response is in.
        open_now = bool(
            Ask.objects.select_for_update()
            .filter(pk=ask.pk, status=Ask.Status.PENDING, deadline__gt=now)
            .values_list("pk", flat=True)
        )
        recorded = open_now and Respondent.objects.filter(pk=clicker.pk, status=Respondent.Status.PENDING).update(
            status=row_status, answers=answers, answered_at=now, surface=DINGTALK_SURFACE
        )
        if recorded:
            _audit(ask, AskEvent.Kind.RESPONDED, Ask.Status.PENDING, Ask.Status.PENDING, actor, DINGTALK_SURFACE,
                   {"respondent_status": row_status})
            counts = Respondent.objects.filter(ask_id=ask.pk)
            total, waiting = counts.count(), counts.filter(status=Respondent.Status.PENDING).count()
            outbox.append(
                agent_id=ask.agent_id, type=OutboxEvent.Type.ASK_PROGRESS, ask=ask,
                data={"received": total - waiting, "total": total},
            )
            if waiting == 0:
                _close(ask, (Ask.Status.PENDING,), Ask.Status.ANSWERED, Ask.Reason.COMPLETED, actor, surface=DINGTALK_SURFACE)
            else:
                transaction.on_commit(partial(_after_change, ask, "show"))
    return _click_outcome(ask, clicker, row_status, answers, bool(recorded))


def _dingtalk_click_result(ask: Ask, reason: str, clicker: Respondent, row_status: str, answers) -> dict[str, Any]:
    result: dict[str, Any] = {}
    kept = (ask.result or {}).get("tool_result")
    if kept:
        result["tool_result"] = kept
    shown = (answers or {}).get("answers", []) if row_status == Respondent.Status.SUBMITTED else []
    result["responses"] = [{"respondent_user_id": clicker.respondent_id, "status": row_status, "answers": shown}]
    result["message"] = dingtalk_tool.answer_message(reason=reason, question_id=ask.id, title=ask.title, answers=shown)
    return result


def _click_outcome(ask: Ask, clicker: Respondent, row_status: str, answers, won: bool) -> ClickResult:
    """The reply to a click. A lost ordinary click was already audited by ``_close``; a refused
    targeted one is audited here (one audit row per ignored click either way)."""
    row = Respondent.objects.get(pk=clicker.pk)
    if won:
        return ClickResult("recorded", ask, "", row)
    ask.refresh_from_db()  # whoever won: the reply shows the card as it is now
    targeted = ask.target_type != Ask.Target.NONE
    actor = f"respondent:{clicker.respondent_id}"
    if row.status == row_status and (row_status == Respondent.Status.CANCELLED or row.answers == answers):
        # The same response again (a double click, a platform re-delivery): same reply, no change.
        if targeted:
            _audit_ignored(ask, f"duplicate/{row_status}", actor, DINGTALK_SURFACE)
        return ClickResult("duplicate", ask, "", row)
    if targeted:
        responded = row.status not in (Respondent.Status.PENDING, Respondent.Status.MISSING)
        _audit_ignored(ask, f"{'again' if responded else 'closed'}/{row_status}", actor, DINGTALK_SURFACE)
        if responded:
            return ClickResult("rejected", ask, dingtalk_tool.NOTICE_ALREADY, row)
    return ClickResult("rejected", ask, dingtalk_tool.NOTICE_CLOSED)
