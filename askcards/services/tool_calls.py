"""One pipeline for every tool call: validate → reserve → deliver → activate.

The tool says, through its hooks (``askcards.tools.base``), what its arguments mean (a typed
request), what the model reads when the call is refused or fails, what an open ask's result shows,
and what happens to the person's older asks. Requests that ask nothing (``ActionRequest``: list,
cancel, …) go to the service registered for their type (``action``); this module names no tool.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from askcards.http import jsonlimits
from askcards import surfaces, tools
from askcards.errors import InvalidInput, UnknownTool
from askcards.models import Agent, Ask, AskEvent, CardMessage, Respondent, Session

from .asks import SYSTEM, ask_activate, ask_invalidate, audit, close, current_result
from .grants import session_check_bot
from .quotas import quota_check_ask
from .sessions import session_check_web_user

logger = logging.getLogger(__name__)

MAX_TIMEOUT_SECONDS = 13 * 24 * 3600  # Feishu cards stop working after 14 days
DEFAULT_TIMEOUT_SECONDS = int(tools.Tool.default_timeout.total_seconds())


@dataclass
class ToolCallOutcome:
    status: str  # pending | answered | cancelled | expired | invalidated | failed | ok
    tool_result: str | None
    ask: Ask | None
    created: bool


ActionHandler = Callable[..., ToolCallOutcome]
_ACTIONS: dict[type[tools.ActionRequest], ActionHandler] = {}


def action(request_type: type[tools.ActionRequest]) -> Callable[[ActionHandler], ActionHandler]:
    """Register the service that answers a tool's ``request_type``; it is called as
    ``handler(request, agent=, session=, owner=)`` and returns the call's outcome."""

    def register(handler: ActionHandler) -> ActionHandler:
        _ACTIONS[request_type] = handler
        return handler

    return register


def tool_call(
    *,
    agent: Agent,
    session: Session,
    name: str,
    arguments: Any,
    call_id: str | None = None,
    sender_id: str = "",
    timeout_seconds: int | None = None,
    audit_detail: dict[str, Any] | None = None,
    host_prompt: bool = False,
    checks: list[dict[str, Any] | None] | None = None,
) -> ToolCallOutcome:
    """Run a model's tool call: validate, reserve, deliver, activate (or fail at once).

    Raises UnknownTool for a name no session has (naming this session's tools), QuotaExceeded
    when the ask would pass one of the agent's quotas (nothing written), and
    WebUserNotGranted / BotNotGranted when the session's web_user / bot is no longer granted to
    the agent (revoked after the session was made: asks already pending stay, and a retry of an
    earlier call_id still returns its ask). Everything else is a
    tool-level outcome the model must see: invalid arguments, a tool this session lacks, no
    surface to ask on. ``timeout_seconds`` sets the deadline of tools that take the call's
    timeout (``Tool.call_timeout``). ``audit_detail`` goes on the ask's "created" audit row (what
    a host's prompt showed, ``services.hosts``). ``host_prompt``: the ask is an agent host's prompt
    (``services.hosts``) — its deadline is ``timeout_seconds`` whatever the tool's own rule, and it
    replaces no older ask (one host may wait on several prompts at once). ``checks``: the rules
    each question (or form field) of a host's elicitation sets on its answer, stored with the ask
    and enforced on every surface's submit (``tools.answer_checks``); a model never sets them.
    """
    tool = tools.get(name)
    if tool is None:
        offered = [t.name for t in tools.tools_for(platform=session.platform, is_subagent=session.is_subagent)]
        expected = f"this session's tools are: {', '.join(offered)}" if offered else "this session has no tools"
        raise UnknownTool(f"unknown tool {name!r}; {expected} (GET /api/v1/sessions/{{id}}/tools lists them)")
    if call_id:
        existing = Ask.objects.filter(agent=agent, call_id=call_id).select_related("session").first()
        if existing is not None:
            return _existing_outcome(existing, session, name)
    session_check_web_user(agent=agent, web_user=session.web_user)
    if timeout_seconds is not None and not 1 <= timeout_seconds <= MAX_TIMEOUT_SECONDS:
        raise InvalidInput(f"timeout_seconds must be from 1 to {MAX_TIMEOUT_SECONDS}, got {timeout_seconds}")

    available = tool in tools.tools_for(platform=session.platform, is_subagent=session.is_subagent)
    refusal = None if available else tool.unavailable()
    if refusal is not None:
        return ToolCallOutcome("failed", refusal, None, False)
    try:
        request = tool.validate(arguments)
        _reject_nul(arguments, "arguments")
    except tools.ToolInputError as exc:
        return ToolCallOutcome("failed", tool.refusal(str(exc)), None, False)

    owner = sender_id or session.user_id or session.web_user
    if isinstance(request, tools.ActionRequest):
        return _ACTIONS[type(request)](request, agent=agent, session=session, owner=owner)
    # After the actions: an agent whose bot was revoked may still list and cancel what it sent.
    session_check_bot(agent=agent, session=session)
    title_limit = Ask._meta.get_field("title").max_length
    if title_limit is not None and len(request.title) > title_limit:
        return ToolCallOutcome("failed", tool.refusal(
            f"arguments: the card title (title, else the first field label or question header) is "
            f"{len(request.title)} characters; at most {title_limit} fit"
        ), None, False)
    _check_respondent_id(owner)
    respondent_ids = list(request.respondent_ids) or [owner]
    now = timezone.now()
    quota_check_ask(agent=agent, respondent_ids=respondent_ids, now=now)
    timeout = request.timeout or (
        timedelta(seconds=timeout_seconds) if timeout_seconds and (tool.call_timeout or host_prompt)
        else tool.default_timeout
    )
    replaces_older = tool.replaces_older and not host_prompt
    bot_id = session.bot.app_id if session.bot else ""
    ask = Ask(
        agent=agent,
        session=session,
        platform=session.platform,
        tool=name,
        call_id=call_id or None,
        sender_id=owner,
        blocking=tool.blocking,
        title=request.title,
        description=request.description,
        questions=_with_checks(request.questions, checks),
        fields=_with_checks(request.fields, checks),
        target_type=request.target_type or Ask.Target.NONE,
        target_id=request.target_id,
        # The person's asks in this conversation: a newer one replaces the older ones.
        scope_key=f"{bot_id}:{session.key}:{owner}"[:800] if replaces_older else "",
        deadline=now + timeout,
        created_at=now,
    )
    failure: str | None
    if not available:
        failure = Ask.Reason.NOT_AVAILABLE
        shown_on: list[surfaces.Surface] = []
    else:
        shown_on = surfaces.reachable_surfaces(session, name)
        failure = None if shown_on else Ask.Reason.NO_SURFACE
    ask.surfaces = [surface.name for surface in shown_on]
    raced = _reserve(ask, respondent_ids, audit_detail or {})
    if raced is not None:
        return raced

    if failure is not None:
        close(ask, Ask.OPEN, Ask.Status.FAILED, failure, SYSTEM, result=tool.failure_result(failure, ask_id=ask.id))
        return _outcome(ask, created=True)
    if not _deliver(ask, shown_on, tool):
        return _outcome(ask, created=True)
    message_id = ""
    if not tool.blocking:
        message_id = CardMessage.objects.filter(ask=ask).values_list("message_id", flat=True).first() or ""
        pending = tool.pending_result(request, ask_id=ask.id, message_id=message_id, deadline=ask.deadline)
        if pending is not None:
            # Written before activation, so whoever ends the ask later keeps it in the result.
            Ask.objects.filter(pk=ask.pk, status=Ask.Status.RESERVED).update(result=pending)
    if not ask_activate(ask=ask):
        # A newer message (or anything else) ended it while it was being delivered; its surfaces
        # already show why (their withdraw ran).
        lost = tool.activation_lost_result(ask_id=ask.id, message_id=message_id)
        if lost is None:
            return _outcome(ask, created=True)
        Ask.objects.filter(pk=ask.pk).update(result={**(current_result(ask) or {}), "tool_result": lost})
        outcome = _outcome(ask, created=True)
        outcome.status = "failed"
        return outcome
    if replaces_older and ask.target_type == Ask.Target.NONE:
        _replace_older(ask, tool)
    return _outcome(ask, created=True)


def _replace_older(ask: Ask, tool: tools.Tool) -> None:
    """The person gets the tool's whole timeout from when the ask is live, and its older asks in
    the same conversation are replaced only once the new one was delivered."""
    assert ask.activated_at is not None  # set by ask_activate, which just won
    Ask.objects.filter(pk=ask.pk, status=Ask.Status.PENDING).update(deadline=ask.activated_at + tool.default_timeout)
    older = (
        # The agent's own asks only: two agents sharing a bot, a chat and a person never replace
        # each other's (scope_key names the bot, the session key and the person, not the agent).
        Ask.objects.filter(
            agent_id=ask.agent_id, scope_key=ask.scope_key, tool=ask.tool, target_type=Ask.Target.NONE,
            status__in=Ask.OPEN,
        )
        .exclude(pk=ask.pk)
        .select_related("session", "agent")
    )
    for other in older:
        ask_invalidate(ask=other, reason=Ask.Reason.SUPERSEDED_BY_QUESTION)


def _check_respondent_id(owner: str) -> None:
    key_limit = Respondent._meta.get_field("respondent_key").max_length
    if key_limit is not None and len(owner.casefold()) > key_limit:
        raise InvalidInput(
            f"sender_id (else the session's user_id) {owner[:40]!r}… is too long: "
            f"at most {key_limit} characters once case-folded"
        )


def _reserve(ask: Ask, respondent_ids: list[str], detail: dict[str, Any]) -> ToolCallOutcome | None:
    """Insert the new ask (reserved), its respondents and its "created" audit row in one
    transaction. When a concurrent retry with the same call_id won the insert, its outcome."""
    try:
        with transaction.atomic():
            ask.save(force_insert=True)
            Respondent.objects.bulk_create(
                Respondent(ask=ask, respondent_id=rid, respondent_key=rid.casefold(), position=index)
                for index, rid in enumerate(respondent_ids)
            )
            audit(ask, AskEvent.Kind.CREATED, "", Ask.Status.RESERVED, f"agent:{ask.agent.name}", detail={"tool": ask.tool, **detail})
    except IntegrityError:
        existing = Ask.objects.select_related("session").get(agent=ask.agent, call_id=ask.call_id)
        return _existing_outcome(existing, ask.session, ask.tool)
    return None


def _deliver(ask: Ask, shown_on: list[surfaces.Surface], tool: tools.Tool) -> bool:
    """Let every surface deliver the reserved ask; on the first failure the ask fails with
    ``delivery_failed`` (the tool's ``failure_result`` is its result) and this is False."""
    for surface in shown_on:
        try:
            surface.deliver(ask)
        except surfaces.DeliveryFailed as exc:
            logger.warning("delivery of ask %s to %s failed: %s", ask.id, surface.name, exc)
            result = tool.failure_result(Ask.Reason.DELIVERY_FAILED, ask_id=ask.id, error=str(exc))
            close(ask, Ask.OPEN, Ask.Status.FAILED, Ask.Reason.DELIVERY_FAILED, SYSTEM, result=result,
                  detail={"error": str(exc)[:300]})
            return False
    return True


def _with_checks(
    items: list[dict[str, Any]] | None, checks: list[dict[str, Any] | None] | None
) -> list[dict[str, Any]] | None:
    """The request's questions (or fields) with their answer checks, as the ask stores them."""
    if items is None or not checks:
        return items
    return [{**item, tools.answer_checks.KEY: check} if check else item
            for item, check in zip(items, [*checks, *[None] * (len(items) - len(checks))])]


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
