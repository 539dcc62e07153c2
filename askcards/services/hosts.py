"""Agent hosts' prompts (``askcards.hosts``) as asks: made through the one tool-call pipeline, and
read back as the host's decision while the host waits.

The ask lives exactly as long as the host waits: its deadline is the wait's, and when the host
stops waiting (its request closed: timed out or interrupted) the ask is cancelled with
``host_gone`` (「智能体已停止等待。」), withdrawing it from every card and panel — nobody answers
into a void. A prompt answered in the host's own terminal is known by what follows it (its tool
ran, or the host session's turn ended with it still open): cancelled ``host_handled``
(「已在终端处理。」). The first answer wins, as everywhere; the host's decision names who gave it
and where in the ask's audit ("delivered").
"""
from __future__ import annotations

import logging
from typing import Any, Callable


from askcards.models import Agent, Ask, AskEvent, ProgressCard, Respondent, Session
from askcards.tools import dingtalk_ask_user_question as dingtalk_tool
from askcards.tools.host_prompts import (
    Answer, HostEventError, Progress, Prompt, answers_from_form, dingtalk_checks, dingtalk_form,
)

from .asks import ask_cancel, audit
from .feishu_progress import progress_put
from .tool_calls import tool_call
from .waiters import waiter_parked

logger = logging.getLogger(__name__)

TOOL = "ask_user_questions"
NO_DECISION: dict[str, Any] = {}  # the host carries on as it would without the hook (its own dialog)
# Platforms whose sessions ask a host's prompts: an ask_user_questions form on Feishu and the
# panel, a DingTalk form on DingTalk (and on the panel of the session's web user).
PLATFORMS = (Session.Platform.FEISHU, Session.Platform.WEB, Session.Platform.DINGTALK)

Decide = Callable[[Prompt, Answer], dict[str, Any]]
Ended = Callable[[Prompt, str], dict[str, Any]]


def host_prompt(*, agent: Agent, session: Session, sender_id: str, prompt: Prompt, timeout_seconds: int) -> str | None:
    """Ask a host's prompt on the session's surfaces for ``timeout_seconds``: the id of the ask the
    host now waits on. None when there is nowhere to ask (no panel open, no card): no decision, the
    host shows its own dialog; likewise for an elicitation larger than the session's form holds.
    HostEventError when any other prompt is not one the form can hold (the tool's own message)."""
    if session.platform not in PLATFORMS:
        raise HostEventError(
            f"a {session.platform} session cannot show an agent host's prompts; name a Feishu, DingTalk or web "
            "session in the hook URL (session=…&platform=feishu|dingtalk|web)")
    if session.platform == Session.Platform.FEISHU and session.bot is not None and not _card_running(session):
        # Feishu asks stack on the session's running progress card: a host that reports no progress
        # (no PreToolUse hook) gets one started for its prompt.
        progress_put(session=session, status=ProgressCard.Status.RUNNING, title=prompt.audit.get("host_title", ""),
                     content="等待确认", sender_id=sender_id)
    if session.platform == Session.Platform.DINGTALK:
        name, arguments, checks = dingtalk_tool.NAME, dingtalk_form(prompt), dingtalk_checks(prompt)
    else:
        name, arguments, checks = TOOL, {"questions": prompt.questions}, list(prompt.checks)
    outcome = tool_call(agent=agent, session=session, name=name, arguments=arguments, sender_id=sender_id,
                        timeout_seconds=timeout_seconds, audit_detail={"host": prompt.audit}, host_prompt=True,
                        checks=checks or None)
    if outcome.ask is not None and outcome.ask.status != Ask.Status.FAILED:
        # Asked (pending, or already answered by someone quick on a surface that showed it): the
        # host's reply reads it as it is now.
        waiter_parked(ask_id=outcome.ask.id)  # the host's lease on it while open (services.waiters)
        return outcome.ask.id
    if outcome.ask is None and prompt.kind == "elicitation":
        # A valid schema this surface's form cannot hold (more properties or choices than it
        # shows): the host asks in its own dialog.
        logger.info("elicitation of agent %s not asked: a %s form cannot hold it (%s); no decision", agent.name,
                    session.platform, (outcome.tool_result or "")[:300])
        return None
    if outcome.ask is None:  # refused before any ask existed: the host's input is not a form we can show
        raise HostEventError(f"this prompt cannot be shown as a form: {outcome.tool_result}")
    logger.info("host prompt of agent %s not asked (ask %s %s): no decision", agent.name, outcome.ask.id,
                outcome.ask.reason)
    return None


def host_reply(*, agent: Agent, ask_id: str, prompt: Prompt, decide: Decide, final: bool,
               ended: Ended | None = None) -> dict[str, Any] | None:
    """The host's reply once its prompt's ask ended: the decision its answer makes; else what the
    host's ``ended`` makes of the ending (an elicitation the person dismissed: ``cancel``), else no
    decision. None while it is open and the host may keep waiting (``final`` False). When the
    wait ends (``final``) with the ask still open, the host is about to stop waiting: the ask is
    withdrawn (``host_gone``) unless an answer wins first."""
    status = Ask.objects.filter(pk=ask_id, agent=agent).values_list("status", flat=True).first()
    if status in Ask.OPEN:
        if not final:
            return None
        host_left(agent=agent, ask_id=ask_id)
    ask = Ask.objects.select_related("session", "agent").get(pk=ask_id, agent=agent)
    if ask.status != Ask.Status.ANSWERED:
        closing = ended(prompt, ask.reason) if ended is not None else {}
        if closing:
            audit(ask, AskEvent.Kind.DELIVERED, ask.status, ask.status, f"agent:{agent.name}", "",
                  {"host": prompt.audit, "decision": _behavior(closing), "by": ""})
        return closing or NO_DECISION
    row = ask.respondents.filter(status=Respondent.Status.SUBMITTED).order_by("position").first()
    if ask.tool == dingtalk_tool.NAME:
        answers = answers_from_form(prompt, (row.answers or {}).get("answers") if row is not None else None)
    else:
        answers = list((ask.result or {}).get("answers") or [])
    answer = Answer(answers=answers, by=row.respondent_id if row else "", surface=row.surface if row else "")
    reply = decide(prompt, answer)
    audit(ask, AskEvent.Kind.DELIVERED, ask.status, ask.status, f"agent:{agent.name}", answer.surface,
          {"host": prompt.audit, "decision": _behavior(reply) or "none", "by": answer.by})
    return reply or NO_DECISION


def host_left(*, agent: Agent, ask_id: str) -> None:
    """The host stopped waiting for this prompt: withdraw its ask everywhere (if still open)."""
    ask = Ask.objects.select_related("session", "agent").filter(pk=ask_id, agent=agent).first()
    if ask is not None and ask.is_open and ask_cancel(ask=ask, reason=Ask.Reason.HOST_GONE, actor=f"agent:{agent.name}"):
        logger.info("ask %s withdrawn: agent %s's host stopped waiting", ask_id, agent.name)


def host_progress(*, session: Session, sender_id: str, progress: Progress) -> None:
    """A host's tool or turn event on a Feishu session's progress card (where the host's prompts
    stack). A turn's end (``completed``) ends the card's run — unless another host session (two
    Claude Code sessions may share one session URL) or an agent still asks on it: ending the run
    would cancel their asks too.

    On every session, the events also settle prompts answered in the host's terminal, which
    askcards would still be asking about (the host keeps the hook's request open until its
    timeout): a tool that ran had its permission given, and a turn that ended left its prompts
    denied; those asks are withdrawn now (``host_handled``)."""
    if progress.settled is not None:
        host_session, tool_name, tool_input = progress.settled
        _settled_in_the_terminal(session, host_session, "its tool runs (permission given in the host's terminal)",
                                 tool_use=(tool_name, tool_input))
    if progress.status == ProgressCard.Status.COMPLETED:
        # Its prompts still open were denied in the terminal (no tool ran).
        _settled_in_the_terminal(session, progress.host_session, "its host session's turn ended")
    if session.platform != Session.Platform.FEISHU or session.bot is None:
        return
    if progress.status != ProgressCard.Status.RUNNING and not _card_running(session):
        return  # nothing running to end
    if progress.status == ProgressCard.Status.COMPLETED and Ask.objects.filter(
            session=session, status__in=Ask.OPEN).exists():
        return  # another host session (or agent) still waits on this card: its run goes on
    progress_put(session=session, status=progress.status, title=progress.title, content=progress.content,
                 sender_id=sender_id)


def _settled_in_the_terminal(session: Session, host_session: str, why: str, *,
                             tool_use: tuple[str, str] | None = None) -> None:
    """Withdraw (``host_handled``) the open prompts of this host session on this askcards session
    that were settled in its terminal: those about one tool use (``tool_use``: the tool's name and
    input, as their audit row recorded them), or all of them. Another Claude Code session's
    prompts sharing the session URL, and an agent's own asks, stay."""
    created = AskEvent.objects.filter(
        kind=AskEvent.Kind.CREATED, ask__session=session, ask__status__in=Ask.OPEN,
        detail__host__session_id=host_session,
    )
    if tool_use is not None:
        created = created.filter(detail__host__tool_name=tool_use[0])
    for row in created.select_related("ask", "ask__session", "ask__agent"):
        if tool_use is not None and row.detail.get("host", {}).get("tool_input") != tool_use[1]:
            continue
        if ask_cancel(ask=row.ask, reason=Ask.Reason.HOST_HANDLED, actor="system"):
            logger.info("ask %s withdrawn: %s", row.ask_id, why)


def _card_running(session: Session) -> bool:
    card = ProgressCard.objects.runs_of(session.pk).first()
    return card is not None and card.is_live


def _behavior(reply: Any) -> str:
    """The decision's ``behavior`` (allow / deny), wherever the host's shape puts it."""
    if isinstance(reply, dict):
        behavior = reply.get("behavior", reply.get("action"))  # a permission's, an elicitation's
        if isinstance(behavior, str):
            return behavior
        for value in reply.values():
            if found := _behavior(value):
                return found
    return ""
