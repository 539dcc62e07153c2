"""The terminal-transition core (SPEC §5): activation, answers, every ending, and their audit.

Each transition is one conditional UPDATE (``… WHERE status IN expected``): the caller that
changes the row wins, every other caller gets ``False`` / a "lost" outcome and changes nothing
but its own audit row. Audit rows and outbox events are written in the same transaction, and
the surfaces' ``mark`` runs inside it; ``show`` / ``withdraw`` and wake-ups run from
``transaction.on_commit``, never inside the transaction.

Nothing here names a tool: what an ask's result holds when it ends is the tool's
``close_result`` hook, how an answer is checked its ``check_answers``.
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from askcards.wake import events
from askcards.http import jsonlimits
from askcards import outbox, surfaces, tools
from askcards.db import statements
from askcards.errors import InvalidInput
from askcards.models import Ask, AskEvent, OutboxEvent, Respondent, Session

logger = logging.getLogger(__name__)

SYSTEM = "system"


# ------------------------------------------------------------------------------------- activation


def ask_activate(*, ask: Ask) -> bool:
    """reserved → pending once every surface has it; the surfaces then show it (after commit)."""
    now = timezone.now()
    with transaction.atomic():
        won = Ask.objects.filter(pk=ask.pk, status=Ask.Status.RESERVED).update(
            status=Ask.Status.PENDING, activated_at=now
        )
        if not won:
            audit_ignored(ask, "activate", SYSTEM, "")
            return False
        ask.status, ask.activated_at = Ask.Status.PENDING, now
        audit(ask, AskEvent.Kind.ACTIVATED, Ask.Status.RESERVED, Ask.Status.PENDING, SYSTEM)
        surfaces.mark_changed(ask)
        transaction.on_commit(partial(after_change, ask, "show"))
    return True


# ---------------------------------------------------------------------------------------- answers


class AnswerRefusal(enum.Enum):
    """Why an answer was not accepted."""

    NOT_PENDING = "not_pending"  # the ask ended before this answer (another one won, or it closed)
    NOT_RESPONDENT = "not_respondent"  # the answer is not its owner's
    INVALID = "invalid"  # the answers do not fit the ask (``detail`` says how); nothing changed


@dataclass
class AnswerOutcome:
    accepted: bool
    ask: Ask
    reason: AnswerRefusal | None = None  # why it was not accepted; None when it was
    detail: str = ""  # what is wrong with an INVALID answer, as the person reads it
    # What the person reads when the form's own rules refused the answer (tools.AnswerRefused):
    # a Feishu card's toast says it; "" for any other refusal.
    notice: str = ""


def ask_answer(
    *,
    ask_id: str,
    answers: Any,
    surface: str,
    respondent_id: str | None = None,
    ask: Ask | None = None,
) -> AnswerOutcome:
    """A person answered on a surface. The first valid answer wins; later ones change nothing.

    ``answers`` is what the surface submitted, checked by the ask's tool (``check_answers``; the
    question tool takes the seed's list of ``{question, selectedLabels, customInput}``). Invalid
    answers raise nothing: they return ``accepted=False, reason=INVALID`` and the ``detail``
    surfaces tell the person. ``respondent_id`` (when given) must be the ask's owner; surfaces
    that authorise otherwise (a logged-in panel user) pass None. ``ask`` (optional) is the row the caller just
    read, with ``session`` loaded; only its id and unchanging fields are relied on.
    """
    if ask is None or ask.pk != ask_id:  # a caller that just read the ask may hand it over
        ask = Ask.objects.select_related("session").get(pk=ask_id)
    tool = tools.get(ask.tool) or tools.Tool()
    actor = f"respondent:{respondent_id or ask.sender_id}"
    # An ask answered here has one respondent, its owner (tool_call keys it by sender_id).
    owner_key = ask.sender_id.casefold()
    if respondent_id is not None and respondent_id.casefold() != owner_key:
        audit_ignored(ask, "not_respondent", actor, surface)
        return AnswerOutcome(False, ask, AnswerRefusal.NOT_RESPONDENT)
    try:
        jsonlimits.check_text(answers, "answers")  # every surface's answers: the panel's, Feishu's
        normalised = tool.check_answers(ask.questions or [], answers)
    except tools.AnswerRefused as refused:
        audit_ignored(ask, "invalid", actor, surface)
        return AnswerOutcome(False, ask, AnswerRefusal.INVALID, str(refused), notice=str(refused))
    except ValueError as exc:  # JSONRefused too
        return AnswerOutcome(False, ask, AnswerRefusal.INVALID, str(exc))
    won = close(
        ask,
        (Ask.Status.PENDING,),
        Ask.Status.ANSWERED,
        Ask.Reason.SUBMITTED,
        actor,
        surface=surface,
        result=tool.answers_result(ask.questions or [], normalised),
        respondent=(owner_key, Respondent.Status.SUBMITTED, normalised),
    )
    if not won:
        return AnswerOutcome(False, ask, AnswerRefusal.NOT_PENDING)
    return AnswerOutcome(True, ask)


def ask_click_rejected(*, ask: Ask, why: str, actor: str, surface: str) -> None:
    """A click that changes nothing (late, wrong person, blank form) still leaves its audit row."""
    audit_ignored(ask, why, actor, surface)


# ---------------------------------------------------------------------------------------- endings


def ask_result_returned(*, ask: Ask) -> None:
    """A response just handed this terminal ask's result to its agent (REST or MCP): the result
    counts as delivered (its retention clock starts) and its ask.closed event needs no webhook."""
    if not ask.is_open and ask.result_delivered_at is None:
        outbox.result_returned(ask.id, timezone.now())
        if ask.status == Ask.Status.ANSWERED:  # a person's answer reached the agent: say so where they gave it
            surfaces.result_delivered(ask)


def ask_results_delivered(*, ask_ids: list[str]) -> None:
    """These asks' results just reached their agents another way (the events feed acknowledged,
    a webhook took them): where people answered, the surfaces that say so do."""
    for ask in Ask.objects.select_related("session").filter(pk__in=set(ask_ids), status=Ask.Status.ANSWERED):
        surfaces.result_delivered(ask)


def ask_result_undeliverable(*, ask_id: str) -> None:
    """The ask's result could never be delivered to its agent's webhook (the retry window closed):
    surfaces that can say so on the card do (DingTalk's dispatch_failed)."""
    ask = Ask.objects.select_related("session").filter(pk=ask_id).first()
    if ask is not None:
        surfaces.result_undeliverable(ask)


def ask_cancel(*, ask: Ask, reason: str = Ask.Reason.BY_AGENT, actor: str, surface: str = "") -> bool:
    """Cancel an open ask (agent, operator, respondent, session cancel; ``surface``: where the
    person did, for the audit row). False if it was not open."""
    if reason not in Ask.REASONS[Ask.Status.CANCELLED]:
        raise InvalidInput(f"reason must be one of {', '.join(Ask.REASONS[Ask.Status.CANCELLED])}, got {reason!r}")
    return close(ask, Ask.OPEN, Ask.Status.CANCELLED, reason, actor, surface=surface)


def ask_expire(*, ask: Ask, now: datetime | None = None) -> bool:
    """The deadline passed (worker only). False if the ask ended another way first."""
    now = now or timezone.now()
    if ask.deadline > now:
        return False
    return close(ask, Ask.OPEN, Ask.Status.EXPIRED, Ask.Reason.TIMEOUT, SYSTEM, now=now)


def ask_invalidate(*, ask: Ask, reason: str, actor: str = SYSTEM) -> bool:
    if reason not in Ask.REASONS[Ask.Status.INVALIDATED]:
        raise InvalidInput(f"reason must be one of {', '.join(Ask.REASONS[Ask.Status.INVALIDATED])}")
    return close(ask, Ask.OPEN, Ask.Status.INVALIDATED, reason, actor)


def cancel_open_asks(session: Session, *, actor: str) -> int:
    """Cancel every open ask of ``session`` (``session_cancelled``), inside the caller's transaction.

    Callers hold one transaction for all the asks. Closing the first takes the agent row's lock
    (outbox.append) until commit, while a callback answering a later ask holds that ask's row and
    waits for the agent row: locking the asks one by one as they closed deadlocked on PostgreSQL
    (found by tests/scale/test_platform_races.py, the card's cancel button racing submits). So
    every open ask is locked first, in id order, before the first close takes the agent row (the
    progress card row the callers lock earlier is one no answer touches); asks answered meanwhile
    drop out. SQLite ignores the lock: its IMMEDIATE transactions already serialise writers.
    """
    asks = list(
        Ask.objects.filter(session=session, status__in=Ask.OPEN)
        .select_related("session", "agent")
        .order_by("pk")
        .select_for_update(of=("self",))
    )
    return sum(ask_cancel(ask=ask, reason=Ask.Reason.SESSION_CANCELLED, actor=actor) for ask in asks)


def expire_due(*, now: datetime | None = None, limit: int = 200) -> int:
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
            if claim_open(ask):
                expired += ask_expire(ask=ask, now=now)
    return expired


def claim_open(ask: Ask) -> bool:
    """Inside a sweep's transaction: lock this open ask's row for this worker (``SKIP LOCKED`` on
    PostgreSQL; SQLite's IMMEDIATE transaction serialises); False when another worker holds it or
    it has ended."""
    claim = Ask.objects.select_for_update(skip_locked=True).filter(pk=ask.pk, status__in=Ask.OPEN)
    return bool(list(claim.values_list("pk", flat=True)))


def purge_answers(*, now: datetime | None = None) -> int:
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
            audit(ask, AskEvent.Kind.PURGED, ask.status, ask.status, SYSTEM)
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


# ------------------------------------------------------------------------------------ the machine


def close(
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
    now: datetime | None = None,
) -> bool:
    """The one terminal transition: conditional UPDATE, audit row, result event, on-commit hooks.

    ``result`` None: the ask's tool says what the ending holds (``close_result``)."""
    now = now or timezone.now()
    # No savepoint when nested (a callback's transaction): nothing here is caught and retried.
    with transaction.atomic(savepoint=False):
        if len(expected) == 1:
            # The hot path (answers): the status it came from is known, no read needed.
            from_status = expected[0]
        else:
            # Lock and read the row first (no-op lock on SQLite, whose IMMEDIATE transactions
            # serialise writers) to know which open status the audit row should name.
            # A deleted row reads as "", which no transition expects.
            from_status = (
                Ask.objects.select_for_update().filter(pk=ask.pk).values_list("status", flat=True).first() or ""
            )
        if result is None:
            result = _result_on_close(ask, status, reason, from_status in expected)
        row = None
        if respondent is not None:
            key, row_status, answers = respondent  # the respondent_key of the person who answered
            row = (key, {"status": row_status, "answers": answers, "answered_at": now, "surface": surface})
        won = from_status in expected and statements.ask_close(
            ask.pk,
            from_status=from_status,
            changes={"status": status, "reason": reason, "closed_at": now, "result": result, "closed_on": surface},
            respondent=row,
            # A targeted collection ends: whoever has not responded is missing.
            missing=ask.target_type != Ask.Target.NONE,
            audit={
                "kind": AskEvent.Kind.CLOSED, "from_status": from_status, "to_status": status, "actor": actor,
                "surface": surface, "detail": {"reason": reason, **(detail or {})}, "created_at": now,
            },
        )
        if not won:
            audit_ignored(ask, f"{status}/{reason}", actor, surface, current=None if len(expected) == 1 else from_status)
            return False
        ask.status, ask.reason, ask.closed_at, ask.result = status, reason, now, result
        ask.closed_on = surface
        if row is not None:
            _answered_in_memory(ask, row[0], row[1])
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
        transaction.on_commit(partial(after_change, ask, "withdraw"))
    logger.info("ask %s %s→%s (%s) by %s via %s", ask.id, from_status, status, reason, actor.split(":")[0], surface or "-")
    return True


def _answered_in_memory(ask: Ask, key: str, values: dict[str, Any]) -> None:
    """An untargeted ask's one respondent row (its owner's: ``tool_call`` made it) as ``close`` just
    wrote it, in ``ask.respondents``: what its surfaces show of the answer after commit (the panel's
    history line) needs no read. A targeted collection's other rows are not known here: it is left
    to be read."""
    if ask.target_type != Ask.Target.NONE or key != ask.sender_id.casefold():
        return
    statements.keep_related(ask, "respondents", [
        Respondent(ask_id=ask.pk, respondent_id=ask.sender_id, respondent_key=key, **values)
    ])


def _result_on_close(ask: Ask, status: str, reason: str, open_now: bool) -> dict[str, Any]:
    """The tool's result for an ending that brings none. Tools that read the respondents read
    them inside the transaction: a targeted result holds the responses as they are now."""
    tool = tools.get(ask.tool) or tools.Tool()
    closing = tools.Closing(
        ask_id=ask.pk, title=ask.title, status=status, reason=reason,
        target_type="" if ask.target_type == Ask.Target.NONE else ask.target_type, target_id=ask.target_id,
    )
    if tool.result_reads_responses:
        if not open_now:
            return {}  # a lost race: nothing is written
        closing = replace(
            closing, kept_tool_result=(current_result(ask) or {}).get("tool_result"), responses=responses(ask)
        )
    elif not ask.blocking:
        return {}
    return tool.close_result(closing)


def responses(ask: Ask) -> list[tools.Response]:
    """The ask's respondents as its tool reads them, in their order."""
    rows = Respondent.objects.filter(ask_id=ask.pk).order_by("position")
    return [tools.Response(row.respondent_id, row.status, row.answers) for row in rows]


def current_result(ask: Ask) -> dict[str, Any] | None:
    return Ask.objects.filter(pk=ask.pk).values_list("result", flat=True).first()


def after_change(ask: Ask, hook: str) -> None:
    """After commit: wake the ask's long-polls and update its surfaces. ``ask`` holds the state
    just committed (the transition sets it in memory), so no re-read is needed."""
    events.wake(events.ask_key(ask.pk))
    surfaces.run_hook(hook, ask)


def audit(
    ask: Ask,
    kind: str,
    from_status: str,
    to_status: str,
    actor: str,
    surface: str = "",
    detail: dict[str, Any] | None = None,
) -> None:
    # By the ORM: a hand-written INSERT saved too little of a Feishu submit to be worth it (bench_statements).
    AskEvent.objects.create(
        ask_id=ask.pk,
        kind=kind,
        from_status=from_status,
        to_status=to_status,
        actor=actor,
        surface=surface,
        detail=detail or {},
    )


def audit_ignored(ask: Ask, attempted: str, actor: str, surface: str, current: str | None = None) -> None:
    """A losing or rejected attempt leaves a trace and nothing else."""
    if current is None:
        current = Ask.objects.filter(pk=ask.pk).values_list("status", flat=True).first() or ""
    with transaction.atomic():
        audit(ask, AskEvent.Kind.IGNORED, current, current, actor, surface, {"attempted": attempted})
