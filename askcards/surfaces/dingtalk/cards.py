"""The DingTalk form card of ``dingtalk_ask_user_question`` (reference/dingtalk-plugin.md §4) as
pure functions of plain data: every card variable for every state of the ask, what a card update
sends, and the private notice a clicker reads when a click did not count.

The form itself (``form.fields``) is the tool's (``askcards.tools.dingtalk_ask_user_question``):
the ask stores it, and answers are read and checked against it there.
"""
from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

from askcards.surfaces.base import shortened
from askcards.tools import answer_checks, dumps
from askcards.tools.dingtalk_ask_user_question import DEFAULT_TIMEOUT_MINUTES, Submission

# The reference plugin's built-in template (reference §4); a bot may configure its own.
TEMPLATE_ID = "c2a6355b-9724-4f7e-9653-d33fcb3311bb.schema"

SUBMIT_BADGE = "提交"
SELECTED_DESC = "已选择：{selected}。"
# askcards' own: an answer given in the person's MCP client (host=ask) says so on the card.
ANSWERED_ON_DESC = {"host": "已在 MCP 客户端回答：{selected}。"}

# DingTalk documents at most 1 KB per card value, public and private (platform §3.6; its own form
# example is larger, so it is a budget, not a hard cap — and the form variable is not cut). What a
# card shows of a person's answer (selected_text, selected_values, question_desc, a respondent's
# own view) and the clicker's notice are cut to this; the answer itself reaches the agent whole.
# A 900 KB answer once made the card update fail with HTTP 413.
VALUE_MAX_BYTES = 1000
# Reference: "…收齐即结束，重启将终止收集。" askcards keeps collections across restarts (SPEC §5.5,
# §6.2), so the card does not claim that a restart ends the collection.
TARGETED_SUFFIX = "\n由 {initiator} 发起；仅指定填写人可提交。结果返回发起会话，{minutes} 分钟后截止；收齐即结束。"

# A targeted respondent's own view of the card after responding, sent to them alone (their answers
# never reach the shared card): respondent status -> (card_status, question_desc, form_btn_text).
RESPONDENT_VIEW: dict[str, tuple[str, str, str]] = {
    "submitted": ("submitted", "你已提交：{selected}。", "已提交"),
    "empty": ("submitted", "你已提交，未填写任何内容。", "已提交"),
    "cancelled": ("cancelled", "你已取消填写。", "已取消"),
}

# terminal reason -> (card_status, question_desc, form_btn_text). Keys are Ask reasons plus the
# card-only dispatch_failed (the ask's result never reached the agent).
TERMINAL_CARD: dict[str, tuple[str, str, str]] = {
    "submitted": ("submitted", "已提交。", "已提交"),
    "empty": ("submitted", "已提交，未填写任何内容。", "已提交"),
    "by_respondent": ("cancelled", "已取消。", "已取消"),
    "by_agent": ("cancelled", "已取消。", "已取消"),
    "by_operator": ("cancelled", "已取消。", "已取消"),
    "session_cancelled": ("cancelled", "已取消。", "已取消"),
    "timeout": ("expired", "问题已失效，请重新发起。", "已失效"),
    "superseded_by_question": ("expired", "已有新的问题卡片，请回答最新卡片。", "已失效"),
    "superseded_by_message": (
        "expired", "你在问题卡片发出后发送了新消息，此卡已失效。请重新发起需要填写的问题。", "已失效",
    ),
    "pause_failed": ("expired", "当前任务未能暂停，此卡已失效，请重新发起。", "已失效"),
    "host_gone": ("expired", "智能体已停止等待。", "已失效"),
    "host_handled": ("expired", "已在终端处理。", "已失效"),
    "caller_gone": ("expired", "智能体已断开，不再等待这个回答。", "已失效"),
    "declined": ("cancelled", "已在 MCP 客户端拒绝回答。", "已取消"),
    "dismissed": ("cancelled", "已在 MCP 客户端关闭，未作答。", "已取消"),
    "restart": ("expired", "服务已重启，原问题上下文已失效，请重新发起。", "已失效"),
    "dispatch_failed": ("expired", "回答已收到，但未能继续会话，请发送一条普通消息继续。", "已失效"),
    "delivery_failed": ("expired", "问题卡片发送失败。", "已失效"),
    # Never on a card (the ask failed before one existed); listed so every reason has a row.
    "no_surface": ("expired", "问题卡片发送失败。", "已失效"),
    "not_available": ("expired", "问题卡片发送失败。", "已失效"),
}
# A targeted collection's own endings: ended by its initiator, everyone responded.
INITIATOR_CANCELLED_DESC = "发起人已取消本次收集。"
COMPLETED_DESC = "已收齐 {count} 人的回应，结果返回发起会话。"

class ClickKind(enum.Enum):
    """What a click on a card did (``services.ClickResult.kind``)."""

    RECORDED = "recorded"  # the response counts
    DUPLICATE = "duplicate"  # the same response again: nothing changed
    REJECTED = "rejected"  # it did not count (``ClickRefusal`` says why)


class ClickRefusal(enum.Enum):
    """Why a click did not count (``services.ClickResult.reason``), told to the clicker."""

    NOT_OWNER = "not_owner"  # an ordinary card: only the person asked answers it
    NOT_RESPONDENT = "not_respondent"  # a targeted collection: not one of its respondents
    NO_IDENTITY = "no_identity"  # the click names nobody
    INVALID = "invalid"  # what the card's form could not have sent (the tool's FormRefused text says what)
    CLOSED = "closed"  # the ask had ended
    ALREADY = "already"  # the respondent responded before


# What the clicker alone reads (the card's private ``user_notice``) when a click did not count,
# by why it did not.
NOTICES = {
    ClickRefusal.NOT_OWNER: "仅提问对象可以回答这张卡片。",
    ClickRefusal.NOT_RESPONDENT: "你不是本次收集的指定填写人，提交未被记录。",
    ClickRefusal.NO_IDENTITY: "无法确认你的身份，提交未被记录。",
    ClickRefusal.ALREADY: "你已回应过本次收集，以第一次回应为准。",
    ClickRefusal.CLOSED: "问题已失效，提交未被记录。",
}
# askcards' own text (the reference lets such submits through): what the card's form would have
# refused — a required field left empty, an impossible date, a choice not among the options, an
# answer over the length bound — in the words the panel uses (the tool's FormRefused text).
REFUSED_NOTICE = "提交未被记录：{why}"


def notice(reason: ClickRefusal | None, refused: str = "") -> str:
    """The clicker's private ``user_notice`` for a click that did not count (``reason``), "" when
    it counted (None); ``refused`` is what the person reads about an ``INVALID`` submit."""
    if reason is None:
        return ""
    if reason is ClickRefusal.INVALID:
        room = VALUE_MAX_BYTES - len(REFUSED_NOTICE.format(why="").encode("utf-8"))
        return REFUSED_NOTICE.format(why=shortened(refused, max_bytes=room, mark="…"))
    return NOTICES[reason]


def with_answer(template: str, selected: str) -> str:
    """``template`` with a person's answers in ``{selected}``, the answers cut to fit one card value."""
    room = VALUE_MAX_BYTES - len(template.format(selected="").encode("utf-8"))
    return template.format(selected=shortened(selected, max_bytes=room))


def values_json(values: list[str]) -> str:
    """``selected_values``: the submitted values as a JSON array within one card value; when the
    whole list does not fit, every value longer than the longest length that fits is cut (and, if
    even that is too long, the list ends early with "…"). Always valid JSON."""
    whole = dumps(values)
    if _size(whole) <= VALUE_MAX_BYTES:
        return whole

    def capped(cap: int) -> list[str]:
        return [value if len(value) <= cap else value[:cap] + "…" for value in values]

    low, high = 0, max(len(value) for value in values)  # capped(high) is the whole list: too long
    while low < high:  # the longest cap that fits, if any
        middle = (low + high + 1) // 2
        if _size(dumps(capped(middle))) <= VALUE_MAX_BYTES:
            low = middle
        else:
            high = middle - 1
    cut = capped(low)
    if _size(dumps(cut)) <= VALUE_MAX_BYTES:
        return dumps(cut)
    low, high = 0, len(cut)  # the most leading values that fit before a closing "…"
    while low < high:
        middle = (low + high + 1) // 2
        if _size(dumps([*cut[:middle], "…"])) <= VALUE_MAX_BYTES:
            low = middle
        else:
            high = middle - 1
    return dumps([*cut[:low], "…"])


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def respondent_view(status: str, submission: Submission | None) -> dict[str, str]:
    """A targeted respondent's own view of the card after responding (``RESPONDENT_VIEW``)."""
    card_status, desc, badge = RESPONDENT_VIEW[status]
    selected = submission.selected_text if submission else ""
    return {"card_status": card_status, "question_desc": with_answer(desc, selected), "form_btn_text": badge}


@dataclass(frozen=True)
class CardState:
    """What a DingTalk card should show now. ``reason`` is "" while the ask is open."""

    question_id: str
    title: str
    description: str
    fields: list[dict[str, Any]]
    reason: str = ""
    targeted: bool = False
    initiator: str = ""
    timeout_minutes: int = DEFAULT_TIMEOUT_MINUTES
    received: int = 0
    total: int = 1
    submission: Submission | None = None
    answered_on: str = ""  # the surface the (ordinary) card's answer was given on


def card_variables(state: CardState) -> dict[str, str]:
    """Every card variable (all strings) for ``state``. Diff against what was pushed with
    ``changed_variables`` to get the keys a card update sends."""
    description = state.description
    if state.targeted:
        description += TARGETED_SUFFIX.format(initiator=state.initiator, minutes=state.timeout_minutes)
    variables = {
        "question_id": state.question_id,
        "question_title": state.title,
        "question_desc": description,
        "card_status": "pending",
        "form_btn_text": SUBMIT_BADGE,
        "selected_text": "",
        "selected_values": "[]",
        # Keys sorted: the fields come back from PostgreSQL's jsonb in another key order than they
        # were created in, and an unchanged form must compare equal to what was pushed.
        # An agent host's answer checks stay askcards' own (checked when a submit arrives).
        "form": json.dumps({"fields": [{key: value for key, value in field.items() if key != answer_checks.KEY}
                                       for field in state.fields]},
                           ensure_ascii=False, separators=(",", ":"), sort_keys=True),
    }
    if not state.reason:
        if state.targeted and state.received > 0:
            # Progress only: who answered what never reaches the shared card.
            variables["form_btn_text"] = f"{state.received}/{state.total}"
        return variables
    variables.update(terminal_variables(state.reason, targeted=state.targeted, total=state.total,
                                        submission=state.submission, answered_on=state.answered_on))
    return variables


def terminal_variables(reason: str, *, targeted: bool = False, total: int = 1,
                       submission: Submission | None = None, answered_on: str = "") -> dict[str, str]:
    """The variables that change when a card closes with ``reason``. Raises ValueError for an unknown one."""
    if targeted and reason == "completed":
        return {"card_status": "submitted", "question_desc": COMPLETED_DESC.format(count=total),
                "form_btn_text": "已结束"}
    if targeted and reason == "by_agent":
        return {"card_status": "cancelled", "question_desc": INITIATOR_CANCELLED_DESC, "form_btn_text": "已取消"}
    if reason not in TERMINAL_CARD:
        raise ValueError(f"no card texts for terminal reason {reason!r}")
    status, desc, badge = TERMINAL_CARD[reason]
    variables = {"card_status": status, "question_desc": desc, "form_btn_text": badge}
    if reason == "submitted" and submission is not None and not submission.empty and not targeted:
        variables["question_desc"] = with_answer(ANSWERED_ON_DESC.get(answered_on, SELECTED_DESC),
                                                 submission.selected_text)
        variables["selected_text"] = shortened(submission.selected_text, max_bytes=VALUE_MAX_BYTES)
        variables["selected_values"] = values_json(submission.values)
    elif reason in ("submitted", "empty") and not targeted:
        variables["selected_text"] = ""
        variables["selected_values"] = "[]"
    return variables


def changed_variables(pushed: dict[str, str] | None, desired: dict[str, str]) -> dict[str, str]:
    """The keys of ``desired`` whose value differs from what was last pushed (all, when nothing was)."""
    pushed = pushed or {}
    return {key: value for key, value in desired.items() if pushed.get(key) != value}
