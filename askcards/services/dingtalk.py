"""DingTalk form cards (SPEC §4.2, reference/dingtalk-plugin.md §7, §9, §10): the tool's list and
cancel actions, and clicks on its cards, ordinary and targeted collections.

Creating a card is the shared tool-call pipeline (``tool_calls``); its results are the tool's
hooks. Non-blocking: the outcome reaches the agent as the ask.closed event's ``message``.
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.db import transaction
from django.utils import timezone

from askcards.http import jsonlimits
from askcards import outbox, selectors, surfaces
from askcards.models import Agent, Ask, AskEvent, Bot, OutboxEvent, Respondent, Session
from askcards.surfaces.dingtalk import surface as dingtalk_surface
from askcards.surfaces.dingtalk.callbacks import CardCallback, ReplayedCallback
from askcards.surfaces.dingtalk.cards import ClickKind as ClickKind  # re-exported: ClickResult.kind
from askcards.surfaces.dingtalk.cards import ClickRefusal as ClickRefusal  # re-exported: ClickResult.reason
from askcards.tools import Closing, Response
from askcards.tools import dingtalk_ask_user_question as dingtalk_tool

from .asks import after_change, ask_cancel, ask_expire, audit, audit_ignored, close
from .sessions import callback_receipt
from .tool_calls import ToolCallOutcome, action

logger = logging.getLogger(__name__)

DINGTALK_SURFACE = "dingtalk"  # the surface name in audit rows and Respondent.surface
WEB_SURFACE = "web"


def _text(details: dict[str, Any]) -> str:
    return dingtalk_tool.tool_result_text(details)


@action(dingtalk_tool.ListRequest)
def collections_list(request: dingtalk_tool.ListRequest, *, agent: Agent, session: Session, owner: str) -> ToolCallOutcome:
    """``list``: the targeted collections this caller started in this conversation, still open."""
    rows = [
        {
            "question_id": ask.id,
            "title": ask.title,
            "deadline": ask.deadline,
            "received": sum(r.status != Respondent.Status.PENDING for r in ask.respondents.all()),
            "total": len(ask.respondents.all()),
        }
        for ask in _owned_collections(agent, session, owner)
    ]
    return ToolCallOutcome("ok", _text(dingtalk_tool.list_details(rows)), None, False)


@action(dingtalk_tool.CancelRequest)
def collection_cancel(request: dingtalk_tool.CancelRequest, *, agent: Agent, session: Session, owner: str) -> ToolCallOutcome:
    """``cancel``: end one of the caller's open collections; its partial results go back in this
    tool result, not as a message (reference §10)."""
    owned = {ask.id: ask for ask in _owned_collections(agent, session, owner)}
    ask = owned.get(request.question_id)
    if ask is None or not ask_cancel(ask=ask, reason=Ask.Reason.BY_AGENT, actor=f"agent:{agent.name}"):
        return ToolCallOutcome("failed", _text(dingtalk_tool.failed_details(dingtalk_tool.CANCEL_NOT_ALLOWED_ERROR)), None, False)
    outbox.result_returned(ask.id, timezone.now())
    assert ask.result is not None  # the cancel just wrote the tool's close_result
    text = _text(dingtalk_tool.cancel_details(ask.result["collection"]))
    return ToolCallOutcome("cancelled", text, None, False)


def _owned_collections(agent: Agent, session: Session, owner: str) -> list[Ask]:
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


def dingtalk_callback(*, bot: Bot, click: CardCallback, receipt: str = "") -> ClickResult | None:
    """The effect of one verified DingTalk card callback, in one transaction: ``receipt`` (an HTTP
    signature pair's ``replay_key``; Stream has none) is recorded with the click's effect, so a
    callback that failed can be retried with the same pair and a used pair is refused
    (ReplayedCallback, changing nothing). None when the callback changes nothing: template noise,
    or a card no ask owns."""
    with transaction.atomic():
        if receipt and not callback_receipt(platform=Bot.Platform.DINGTALK, event_id=receipt):
            raise ReplayedCallback(receipt)
        if click.ignorable:
            return None  # the card-level fromConfig event
        ask = dingtalk_surface.find_ask(bot, click.out_track_id, click.question_id)
        if ask is None:
            logger.info("dingtalk callback for app %s names no known card (%s)", bot.app_id, click.out_track_id or "-")
            return None
        return dingtalk_click(ask=ask, user_id=click.user_id, action=click.action, form=click.form)


@dataclass
class ClickResult:
    """What a DingTalk card click did (``kind``); ``reason`` says why a rejected click did not
    count (the surface tells the clicker); ``respondent`` is the clicker's row once they have
    responded. An ``INVALID`` submit carries what the person reads (``notice``, the tool's
    ``FormRefused`` text) and the ``field`` it is about ("" for the form as a whole)."""

    kind: ClickKind
    ask: Ask
    reason: ClickRefusal | None = None
    respondent: Respondent | None = None
    notice: str = ""
    field: str = ""


def dingtalk_click(
    *, ask: Ask, user_id: str, action: str, form: Any, surface: str = DINGTALK_SURFACE
) -> ClickResult:
    """A submit or cancel on an ask's DingTalk card (``action``: ``submit`` | ``cancel``), or the
    same on the web panel (``surface="web"``, from ``dingtalk_panel_answer``).

    A submit's ``form`` is checked by the tool, one rule for card and panel (``check_form``): what
    the card's form could not have sent is refused (``invalid``, with what the person reads) and
    changes nothing but an audit row; unknown fields are dropped and hidden or read-only ones keep
    their defaults, both named in the answer's audit row.

    Ordinary cards: only the asker may answer; the first submit, empty submit or cancel ends the
    ask (one conditional UPDATE, racing new messages, the deadline and cancels cleanly). Targeted
    collections: only listed respondents (case-insensitive; a click naming nobody is refused);
    each one's first response is recorded and later ones ignored; the ask ends, with the
    collection's result, when the last one responds. A repeat of a recorded response is
    ``duplicate`` and changes nothing but an audit row.
    """
    if action not in ("submit", "cancel"):
        raise ValueError(f"action must be submit or cancel, got {action!r}")
    actor = f"respondent:{user_id or '?'}"
    respondents = list(ask.respondents.all())
    clicker = next((r for r in respondents if user_id and r.respondent_key == user_id.strip().casefold()), None)
    if clicker is None:
        if not user_id.strip():
            refused = ClickRefusal.NO_IDENTITY
        elif ask.target_type == Ask.Target.NONE:
            refused = ClickRefusal.NOT_OWNER
        else:
            refused = ClickRefusal.NOT_RESPONDENT
        audit_ignored(ask, "not_respondent", actor, surface)
        return ClickResult(ClickKind.REJECTED, ask, refused)

    checked = dingtalk_tool.CheckedForm({})
    if action == "submit":
        try:
            checked = dingtalk_tool.TOOL.check_form(ask.fields or [], form)
        except dingtalk_tool.FormRefused as refused_form:
            return _form_refused(ask, clicker, refused_form, actor, surface)
    detail = checked.audit_detail()
    if detail:
        logger.info("dingtalk submit for ask %s: %d unknown field(s) dropped, %d hidden or read-only value(s) "
                    "kept at the default", ask.id, len(checked.unknown), len(checked.kept_defaults))

    answers: dict[str, Any] | None
    if action == "cancel":
        row_status, answers = Respondent.Status.CANCELLED, None
    else:
        submission = dingtalk_tool.read_submission(ask.fields or [], checked.form)
        if submission.empty:
            row_status, answers = Respondent.Status.EMPTY, {"answers": [], "values": []}
        else:
            row_status = Respondent.Status.SUBMITTED
            answers = {"answers": submission.answers, "values": submission.values}

    if ask.target_type == Ask.Target.NONE:
        if ask.is_open and ask.deadline <= timezone.now():
            # Past its deadline before the sweep got to it: the deadline wins, as it would have.
            ask_expire(ask=ask)
            audit_ignored(ask, f"late/{row_status}", actor, surface)
            ask.refresh_from_db()
            return ClickResult(ClickKind.REJECTED, ask, ClickRefusal.CLOSED)
        reasons = {Respondent.Status.CANCELLED: Ask.Reason.BY_RESPONDENT, Respondent.Status.EMPTY: Ask.Reason.EMPTY}
        reason = reasons.get(row_status, Ask.Reason.SUBMITTED)
        status = Ask.Status.CANCELLED if action == "cancel" else Ask.Status.ANSWERED
        won = close(ask, (Ask.Status.PENDING,), status, reason, actor, surface=surface,
                     respondent=(clicker.respondent_key, row_status, answers),
                     result=_click_result(ask, status, reason, clicker, row_status, answers), detail=detail)
        return _click_outcome(ask, clicker, row_status, answers, won, surface)

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
            status=row_status, answers=answers, answered_at=now, surface=surface
        )
        if recorded:
            audit(ask, AskEvent.Kind.RESPONDED, Ask.Status.PENDING, Ask.Status.PENDING, actor, surface,
                   {"respondent_status": row_status, **detail})
            counts = Respondent.objects.filter(ask_id=ask.pk)
            total, waiting = counts.count(), counts.filter(status=Respondent.Status.PENDING).count()
            outbox.append(
                agent_id=ask.agent_id, type=OutboxEvent.Type.ASK_PROGRESS, ask=ask,
                data={"received": total - waiting, "total": total},
            )
            if waiting == 0:
                close(ask, (Ask.Status.PENDING,), Ask.Status.ANSWERED, Ask.Reason.COMPLETED, actor, surface=surface)
            else:
                # The collection's progress (k/N) is marked with the response it shows, in this
                # transaction, as every transition's is; the surfaces show it after commit.
                surfaces.mark_changed(ask)
                transaction.on_commit(partial(after_change, ask, "show"))
    return _click_outcome(ask, clicker, row_status, answers, bool(recorded), surface)


def _form_refused(ask: Ask, clicker: Respondent, refused: dingtalk_tool.FormRefused, actor: str,
                  surface: str) -> ClickResult:
    """A submit the card's form could not have sent (a forged or garbled one, or an answer over
    the length bound): refused, the ask stays open for a real answer. A closed ask, or a
    respondent who already responded, is told so whatever was sent."""
    if ask.status != Ask.Status.PENDING:
        audit_ignored(ask, "closed/invalid", actor, surface)
        return ClickResult(ClickKind.REJECTED, ask, ClickRefusal.CLOSED)
    if clicker.status != Respondent.Status.PENDING:
        audit_ignored(ask, "again/invalid", actor, surface)
        return ClickResult(ClickKind.REJECTED, ask, ClickRefusal.ALREADY, clicker)
    logger.warning("dingtalk submit for ask %s refused: %s", ask.id, refused.field[:64] or "the form as a whole")
    audit_ignored(ask, "invalid", actor, surface)
    return ClickResult(ClickKind.REJECTED, ask, ClickRefusal.INVALID, notice=str(refused), field=refused.field)


def _click_result(
    ask: Ask, status: str, reason: str, clicker: Respondent, row_status: str, answers: dict[str, Any] | None
) -> dict[str, Any]:
    """The result of an ordinary card's click that ends it: the tool's, from this one response."""
    closing = Closing(
        ask_id=ask.pk, title=ask.title, status=status, reason=reason,
        kept_tool_result=(ask.result or {}).get("tool_result"),
        responses=[Response(clicker.respondent_id, row_status, answers)],
    )
    return dingtalk_tool.TOOL.close_result(closing)


def _click_outcome(
    ask: Ask, clicker: Respondent, row_status: str, answers: dict[str, Any] | None, won: bool, surface: str
) -> ClickResult:
    """The reply to a click. A lost ordinary click was already audited by ``close``; a refused
    targeted one is audited here (one audit row per ignored click either way)."""
    row = Respondent.objects.get(pk=clicker.pk)
    if won:
        return ClickResult(ClickKind.RECORDED, ask, None, row)
    ask.refresh_from_db()  # whoever won: the reply shows the card as it is now
    targeted = ask.target_type != Ask.Target.NONE
    actor = f"respondent:{clicker.respondent_id}"
    if row.status == row_status and (row_status == Respondent.Status.CANCELLED or row.answers == answers):
        # The same response again (a double click, a platform re-delivery): same reply, no change.
        if targeted:
            audit_ignored(ask, f"duplicate/{row_status}", actor, surface)
        return ClickResult(ClickKind.DUPLICATE, ask, None, row)
    if targeted:
        responded = row.status not in (Respondent.Status.PENDING, Respondent.Status.MISSING)
        audit_ignored(ask, f"{'again' if responded else 'closed'}/{row_status}", actor, surface)
        if responded:
            return ClickResult(ClickKind.REJECTED, ask, ClickRefusal.ALREADY, row)
    return ClickResult(ClickKind.REJECTED, ask, ClickRefusal.CLOSED)


class PanelRefusal(enum.Enum):
    """Why a DingTalk form answered on the web panel did not count."""

    NOT_FOUND = "not_found"  # not an ask this panel may answer
    NOT_RESPONDENT = "not_respondent"  # the panel's user is not one of its respondents
    NOT_PENDING = "not_pending"  # the ask ended before this answer
    ALREADY = "already"  # they responded before
    INVALID = "invalid"  # what the card's form would refuse (``detail`` says what, ``field`` where)


@dataclass
class PanelAnswer:
    """What a DingTalk form answered on the web panel did. When not ``ok``, ``reason`` says why;
    an ``INVALID`` one carries what the person reads (``detail``) and the ``field`` it is about."""

    ok: bool
    ask: Ask | None
    reason: PanelRefusal | None = None
    detail: str = ""
    field: str = ""
    respondent: Respondent | None = None


def dingtalk_panel_answer(*, username: str, ask_id: str, action: str, form: Any) -> PanelAnswer:
    """``username``'s web panel submits (or cancels) a DingTalk form ask, as the card would.

    The panel answers only for its signed-in user: the respondent whose id is the session's user
    (``selectors.panel_identity``) — on an ordinary card the asker, in a targeted collection only
    if they are one of its targets. Then it is the card's click (``dingtalk_click``), checked by
    the same rule (what the card's form would refuse is refused, nothing changes): the first
    answer wins across card and panel, a collection closes when its last respondent responds.
    """
    ask = selectors.panel_ask(username=username, ask_id=ask_id)
    if ask is None or ask.tool != dingtalk_tool.NAME or "web" not in ask.surfaces:
        return PanelAnswer(False, None, PanelRefusal.NOT_FOUND)
    if action not in ("submit", "cancel"):
        return PanelAnswer(False, ask, PanelRefusal.INVALID, "未知的操作，应为提交或取消。")
    row = selectors.panel_respondent(ask)
    if row is None:
        audit_ignored(ask, "not_respondent", f"respondent:{selectors.panel_identity(ask.session)}", WEB_SURFACE)
        return PanelAnswer(False, ask, PanelRefusal.NOT_RESPONDENT)
    if action == "submit":
        try:
            jsonlimits.check_text(form, "form")
        except jsonlimits.JSONRefused as exc:  # text the database would refuse
            return PanelAnswer(False, ask, PanelRefusal.INVALID, str(exc))
    click = dingtalk_click(ask=ask, user_id=row.respondent_id, action=action, form=form if action == "submit" else {},
                           surface=WEB_SURFACE)
    if click.kind in (ClickKind.RECORDED, ClickKind.DUPLICATE):
        return PanelAnswer(True, click.ask, respondent=click.respondent)
    if click.reason is ClickRefusal.INVALID:
        return PanelAnswer(False, click.ask, PanelRefusal.INVALID, click.notice, click.field)
    why = PanelRefusal.ALREADY if click.reason is ClickRefusal.ALREADY else PanelRefusal.NOT_PENDING
    return PanelAnswer(False, click.ask, why, respondent=click.respondent)
