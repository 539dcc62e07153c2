"""The host as a surface (``host=ask`` on an MCP URL): an ask also put to the MCP client's own
user as a form elicitation (``askcards.tools.host_form``), and their response taken as their
answer, surface ``host``.

The response races the panel and the cards through the same transitions: an ``accept`` answers
the ask as a submit there would (``ask_answer`` for ``ask_user_questions``, ``dingtalk_click`` for
a DingTalk form, with the same checks), and the first answer wins. ``decline`` and ``cancel`` are
the person's answer too, not a failure: the ask is cancelled ``declined`` (they refused) or
``dismissed`` (they closed the form without choosing), reasons the agent and every surface tell
apart. Only the agent's own asks; a targeted DingTalk collection is never put to the host.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from askcards.errors import NotFound
from askcards.models import Agent, Ask
from askcards.surfaces.dingtalk.cards import ClickKind, ClickRefusal
from askcards.tools import dingtalk_ask_user_question as dingtalk_tool
from askcards.tools import host_form

from .asks import AnswerRefusal, ask_answer, ask_cancel
from .dingtalk import dingtalk_click

HOST_SURFACE = "host"  # an answer given in the MCP client's own form (host=ask)
ACTIONS = {"decline": Ask.Reason.DECLINED, "cancel": Ask.Reason.DISMISSED}


class HostRefusal(enum.Enum):
    """Why the host's response did not end the ask."""

    NOT_OPEN = "not_open"  # another surface answered first, or the ask ended another way
    INVALID = "invalid"  # content that does not answer the form (``detail`` says what); nothing changed


@dataclass(frozen=True)
class HostResponse:
    """What the host's response did. ``taken``: it ended the ask. Otherwise ``reason`` says why,
    and an ``INVALID`` one what is wrong (``detail``)."""

    taken: bool
    ask: Ask
    reason: HostRefusal | None = None
    detail: str = ""


def host_ask(*, agent: Agent, ask_id: str) -> Ask:
    """One of the agent's asks, as the host surface reads it (NotFound for any other)."""
    ask = (Ask.objects.select_related("session", "agent").prefetch_related("respondents")
           .filter(pk=ask_id, agent=agent).first())
    if ask is None:
        raise NotFound(f"no ask {ask_id} of this agent")
    return ask


def host_respond(*, agent: Agent, ask_id: str, action: str, content: Any = None) -> HostResponse:
    """The host's user responded to the form of one of the agent's asks (``action``: ``accept``
    with ``content``, ``decline`` or ``cancel``, as an elicitation result says)."""
    if action not in ("accept", *ACTIONS):
        raise ValueError(f"action must be accept, decline or cancel, got {action!r}")
    ask = host_ask(agent=agent, ask_id=ask_id)
    if ask.target_type != Ask.Target.NONE:
        return HostResponse(False, ask, HostRefusal.INVALID, "a targeted collection is not put to the host")
    if not ask.is_open:
        return HostResponse(False, ask, HostRefusal.NOT_OPEN)
    actor = f"host:{agent.name}"
    if action in ACTIONS:
        won = ask_cancel(ask=ask, reason=ACTIONS[action], actor=actor, surface=HOST_SURFACE)
        return HostResponse(won, ask, None if won else HostRefusal.NOT_OPEN)
    try:
        answer = host_form.read(tool=ask.tool, questions=ask.questions, fields=ask.fields, content=content)
    except host_form.FormContentError as exc:
        return HostResponse(False, ask, HostRefusal.INVALID, str(exc))
    if ask.tool == dingtalk_tool.NAME:
        owner = next(iter(ask.respondents.all()), None)
        if owner is None:
            return HostResponse(False, ask, HostRefusal.NOT_OPEN)
        click = dingtalk_click(ask=ask, user_id=owner.respondent_id, action="submit", form=answer, surface=HOST_SURFACE)
        if click.kind is ClickKind.RECORDED:
            return HostResponse(True, click.ask)
        if click.reason is ClickRefusal.INVALID:
            return HostResponse(False, click.ask, HostRefusal.INVALID, click.notice)
        return HostResponse(False, click.ask, HostRefusal.NOT_OPEN)
    outcome = ask_answer(ask_id=ask.id, answers=answer, surface=HOST_SURFACE, ask=ask)
    if outcome.accepted:
        return HostResponse(True, outcome.ask)
    if outcome.reason is AnswerRefusal.INVALID:
        return HostResponse(False, outcome.ask, HostRefusal.INVALID, outcome.detail)
    return HostResponse(False, outcome.ask, HostRefusal.NOT_OPEN)
