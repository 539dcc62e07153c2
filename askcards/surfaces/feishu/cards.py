"""The Feishu progress card (SPEC §6.1; reference §1, §1.12, §6) as pure functions of plain data.

One ``form`` per pending ask, stacked in registration order, only while the task is running.
A form that left the card for a reason the card alone cannot tell — nobody waits for its answer
any more (the agent host's prompt was settled in its terminal or the host stopped waiting, an MCP
caller went away), or the person answered, declined or closed it in their MCP client or an MCP
App — leaves a line saying so, in the words the panel and the DingTalk card use, instead of just
vanishing.
Names are unique across the whole card (``ask_{n}``, ``q{n}_{i}``, ``c{n}_{i}``, ``submit_{n}``,
where ``n`` is the form's position on this render); the ask id only travels in the submit
button's callback value. Every render fits Feishu's limits: asks that do not fit become a note
pointing to the web panel, and the progress text is shortened to what is left.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Feishu rejects cards over 30 KB (230025) and the stored message can grow beyond the request
# body (reference §1.4), so renders keep 2 KB of headroom.
CARD_MAX_BYTES = 28 * 1024
CARD_MAX_ELEMENTS = 200
# The input component's own limit (1–1000, reference §1.4): a Feishu client sends no more. The
# server accepts longer text from other surfaces (tools.ANSWER_TEXT_MAX_CHARS, the panel's bound).
INPUT_MAX_CHARS = 1000

# Agent-supplied text is cut so that even a worst-case ask (4 questions x 4 options, every
# character escaped or 3 bytes of UTF-8) fits on a card by itself.
TITLE_CHARS = 100
QUESTION_CHARS = 400
LABEL_CHARS = 60
DESCRIPTION_CHARS = 100
CONTENT_CHARS = 6000
# While deciding how many forms fit, the progress text is assumed to be this short at least.
CONTENT_FLOOR_CHARS = 300

WAITING = "等待你的回复"
RECOVERING = "任务正在恢复执行"
SUBMIT = "提交答案"
SELECT_PLACEHOLDER = "请选择"
OTHER_PLACEHOLDER = "其他（可选）"
MULTI_SELECT_NOTE = "（可多选）"
CANCEL = "取消任务"
DETAIL = "会话详情"
DEFAULT_TITLE = "任务进度"
HINT = "有 {n} 组问题等待你的回复：请在下方表单中作答并点击「提交答案」，无需另发消息回复。"
OVERFLOW_NOTE = "另有 {n} 组问题超出卡片容量，请在网页面板中作答"

# Why a form left the card, for the endings a person could not tell from the card alone (the
# panel's and the DingTalk card's words); the latest few of the run are named. By the ask's reason
# when it ended without an answer, by the surface it was answered on (``ANSWERED_ON``) otherwise.
WITHDRAWN_TEXT = {
    "host_gone": "智能体已停止等待。",
    "host_handled": "已在终端处理。",
    "caller_gone": "智能体已断开，不再等待这个回答。",
    "declined": "已在 MCP 客户端拒绝回答。",
    "dismissed": "已在 MCP 客户端关闭，未作答。",
}
ANSWERED_ON = {"host": "已在 MCP 客户端回答。", "host_app": "已在 MCP 应用回答。"}
ANSWERED = ("submitted", "empty")  # an ask's reasons when someone's answer ended it
WITHDRAWN_HEADING = "已撤回的问题"
WITHDRAWN_SHOWN = 3
WITHDRAWN_WHAT_CHARS = 20  # a header (ask_user_questions: at most 12)

TOAST_SUBMITTED = "已提交"
TOAST_STALE = "问题已失效"
TOAST_NOT_SENDER = "仅消息发送者可操作"
TOAST_BLANK = "请至少选择一项或填写其他"
TOAST_REFUSED = "提交未被记录：{why}"  # the form's own rules refused the answer (DingTalk's words)
TOAST_CANCELLED = "任务已取消"  # the card's cancel button; the spec gives no text

STATUS_TEXT = {
    "running": "执行中",
    "completed": "已完成",
    "failed": "执行失败",
    "cancelled": "已取消",
    "recovering": RECOVERING,
}
TEMPLATE = {"running": "blue", "completed": "green", "failed": "red", "cancelled": "grey", "recovering": "wathet"}
WAITING_TEMPLATE = "orange"

ASK_KIND = "feishu_ask"
PROGRESS_KIND = "feishu_progress"

# Characters Feishu markdown would interpret; shown literally as HTML entities (reference §1.11).
_MARKDOWN_SPECIAL = set("&\\`*_~[](){}<>#:|!+-=\"'$")


@dataclass(frozen=True)
class PendingAsk:
    """A pending ``ask_user_questions`` ask as the card shows it."""

    id: str
    questions: Sequence[Mapping[str, Any]]  # normalised: question, header, options[label, description], multiSelect
    sender: str = ""  # open_id allowed to submit; the view's sender when blank


@dataclass(frozen=True)
class WithdrawnAsk:
    """An ask of this run that left the card, and why: a ``WITHDRAWN_TEXT`` reason, or an answer
    given on an ``ANSWERED_ON`` surface."""

    id: str
    what: str  # its first question's header
    reason: str
    surface: str = ""  # where its answer (or decline) was given ("" when nobody's)

    @property
    def text(self) -> str:
        return ANSWERED_ON.get(self.surface, "") if self.reason in ANSWERED else WITHDRAWN_TEXT.get(self.reason, "")


@dataclass(frozen=True)
class ProgressView:
    """Everything one render of a session's progress card depends on."""

    status: str  # running | completed | failed | cancelled | recovering
    title: str = ""
    content: str = ""  # the agent's progress markdown
    session_id: str = ""
    sender: str = ""  # owner of the task (cancel button)
    detail_url: str = ""
    panel_url: str = ""  # where asks that do not fit can be answered
    asks: Sequence[PendingAsk] = ()  # registration order
    more_asks: int = 0  # pending asks after ``asks`` that were not even loaded: they go to the panel note
    withdrawn: Sequence[WithdrawnAsk] = ()  # the run's latest withdrawn asks, newest first


@dataclass(frozen=True)
class RenderedCard:
    card: dict[str, Any]
    shown: tuple[str, ...] = ()  # ask ids that have a form on this card
    overflow: tuple[str, ...] = ()  # ask ids only answerable in the web panel
    size: int = 0  # bytes of the card JSON as sent
    elements: int = 0


def dumps_card(card: Mapping[str, Any]) -> str:
    """The card JSON exactly as it is sent (message ``content``) and measured against 30 KB."""
    return json.dumps(card, ensure_ascii=False, separators=(",", ":"))


def card_size(card: Mapping[str, Any]) -> int:
    return len(dumps_card(card).encode("utf-8"))


def count_elements(node: Any) -> int:
    """Every tagged object counts toward the 200-element limit, text objects included (reference §1.4)."""
    # Concrete types: cards are plain JSON data, and an ABC check per node is slow on big cards.
    if isinstance(node, dict):
        return ("tag" in node) + sum(count_elements(value) for value in node.values() if isinstance(value, (dict, list)))
    if isinstance(node, list):
        return sum(count_elements(value) for value in node if isinstance(value, (dict, list)))
    return 0


def fits(card: Mapping[str, Any]) -> bool:
    return card_size(card) <= CARD_MAX_BYTES and count_elements(card) <= CARD_MAX_ELEMENTS


def escape_md(text: str) -> str:
    """Agent and user text shown literally in a markdown component (never interpreted)."""
    return "".join(f"&#{ord(char)};" if char in _MARKDOWN_SPECIAL else char for char in text)


def truncate(text: str, limit: int) -> str:
    text = text or ""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def _plain(content: str) -> dict[str, str]:
    return {"tag": "plain_text", "content": content}


def _question_elements(n: int, i: int, question: Mapping[str, Any]) -> list[dict[str, Any]]:
    multi = bool(question.get("multiSelect"))
    lines = [f"**{escape_md(question['header'])}**{MULTI_SELECT_NOTE if multi else ''}"]
    lines.append(escape_md(truncate(question["question"], QUESTION_CHARS)))
    options = question["options"]
    described = []
    for option in options:
        label = escape_md(truncate(option["label"], LABEL_CHARS))
        description = truncate(option.get("description") or "", DESCRIPTION_CHARS)
        described.append(f"- {label}：{escape_md(description)}" if description else f"- {label}")
    return [
        {"tag": "markdown", "content": "\n".join(lines) + "\n\n" + "\n".join(described)},
        {
            "tag": "multi_select_static" if multi else "select_static",
            "name": f"q{n}_{i}",
            "width": "fill",
            # Explicit on both: the multi-select default is true, which would forbid "other only".
            "required": False,
            "placeholder": _plain(SELECT_PLACEHOLDER),
            "options": [
                {"text": _plain(truncate(option["label"], LABEL_CHARS)), "value": str(index)}
                for index, option in enumerate(options)
            ],
        },
        {
            "tag": "input",
            "name": f"c{n}_{i}",
            "width": "fill",
            "required": False,
            "max_length": INPUT_MAX_CHARS,
            "placeholder": _plain(OTHER_PLACEHOLDER),
        },
    ]


def ask_form(n: int, ask: PendingAsk, *, session_id: str, sender: str) -> dict[str, Any]:
    """The ``n``-th form of a card: the ask's questions and a submit button carrying its id."""
    elements: list[dict[str, Any]] = []
    for i, question in enumerate(ask.questions):
        elements += _question_elements(n, i, question)
    value = {"kind": ASK_KIND, "act": "submit", "sessionId": session_id, "requestId": ask.id,
             "sender": ask.sender or sender}
    elements.append(
        {
            "tag": "button",
            "name": f"submit_{n}",
            "type": "primary",
            "size": "medium",
            "text": _plain(SUBMIT),
            "form_action_type": "submit",
            "behaviors": [{"type": "callback", "value": value}],
        }
    )
    return {"tag": "form", "name": f"ask_{n}", "elements": elements}


def _is_http_url(url: str) -> bool:
    return url.startswith(("https://", "http://"))


def _buttons(view: ProgressView) -> list[dict[str, Any]]:
    """Cancel and detail buttons: outside every form, so pressing them never submits one."""
    buttons = []
    if view.status in ("running", "recovering"):
        value = {"kind": PROGRESS_KIND, "act": "cancel", "sessionId": view.session_id, "sender": view.sender}
        buttons.append({"tag": "button", "type": "default", "size": "small", "text": _plain(CANCEL),
                        "behaviors": [{"type": "callback", "value": value}]})
    if _is_http_url(view.detail_url):
        buttons.append({"tag": "button", "type": "default", "size": "small", "text": _plain(DETAIL),
                        "behaviors": [{"type": "open_url", "default_url": view.detail_url}]})
    if not buttons:
        return []
    columns = [{"tag": "column", "width": "auto", "elements": [button]} for button in buttons]
    return [{"tag": "column_set", "flex_mode": "flow", "horizontal_spacing": "8px", "columns": columns}]


def _overflow_note(count: int, panel_url: str) -> dict[str, Any]:
    text = OVERFLOW_NOTE.format(n=count)
    if _is_http_url(panel_url):
        # A space before the link: a URL glued to CJK text can fail the send (reference §1.11).
        text += f"： [打开网页面板]({panel_url})"
    return {"tag": "markdown", "content": text}


def withdrawn_note(withdrawn: Sequence[WithdrawnAsk]) -> dict[str, Any] | None:
    """One line per withdrawn ask (at most ``WITHDRAWN_SHOWN``): what it asked and why it left."""
    lines = [f"- {escape_md(truncate(ask.what, WITHDRAWN_WHAT_CHARS))}：{ask.text}"
             for ask in withdrawn[:WITHDRAWN_SHOWN] if ask.text]
    if not lines:
        return None
    return {"tag": "markdown", "content": f"**{WITHDRAWN_HEADING}**\n" + "\n".join(lines)}


def _assemble(view: ProgressView, forms: list[dict[str, Any]], overflow: int, content: str) -> dict[str, Any]:
    waiting = bool(forms or overflow)
    status_text = WAITING if waiting else STATUS_TEXT[view.status]
    elements: list[dict[str, Any]] = []
    if forms:
        hint = HINT.format(n=len(forms))
        elements.append({"tag": "markdown", "content": f"**{hint}**"})
    if view.status == "recovering":
        elements.append({"tag": "markdown", "content": f"**{RECOVERING}**"})
    if content:
        elements.append({"tag": "markdown", "content": content})
    if forms:
        elements.append({"tag": "hr"})
        elements += forms
    if overflow:
        elements.append(_overflow_note(overflow, view.panel_url))
    note = withdrawn_note(view.withdrawn)
    if note is not None:
        elements.append(note)
    elements += _buttons(view)
    return {
        "schema": "2.0",
        "config": {"update_multi": True, "summary": {"content": status_text}},
        "header": {
            "title": _plain(truncate(view.title or DEFAULT_TITLE, TITLE_CHARS)),
            "subtitle": _plain(status_text),
            "template": WAITING_TEMPLATE if waiting else TEMPLATE[view.status],
        },
        "body": {"elements": elements},
    }


def _fit_content(view: ProgressView, forms: list[dict[str, Any]], overflow: int) -> dict[str, Any]:
    """The card with the longest progress text (≤ CONTENT_CHARS) that still fits."""
    content = view.content or ""
    card = _assemble(view, forms, overflow, truncate(content, CONTENT_CHARS))
    if fits(card):
        return card
    low, high = 0, min(len(content), CONTENT_CHARS)  # low always fits: the forms were chosen with it
    while low < high:
        middle = (low + high + 1) // 2
        if fits(_assemble(view, forms, overflow, truncate(content, middle))):
            low = middle
        else:
            high = middle - 1
    return _assemble(view, forms, overflow, truncate(content, low))


def render_progress_card(view: ProgressView) -> RenderedCard:
    """Render the card for ``view``; forms only while running, in order, as many as fit."""
    if view.status not in STATUS_TEXT:
        raise ValueError(f"unknown progress card status {view.status!r}; expected one of {sorted(STATUS_TEXT)}")
    asks = list(view.asks) if view.status == "running" else []
    more = view.more_asks if view.status == "running" else 0
    forms = [ask_form(n, ask, session_id=view.session_id, sender=view.sender) for n, ask in enumerate(asks)]
    # The usual case: everything fits at once, measured once (the callback's hot path).
    whole = _assemble(view, forms, more, truncate(view.content or "", CONTENT_CHARS))
    size, elements = card_size(whole), count_elements(whole)
    if size <= CARD_MAX_BYTES and elements <= CARD_MAX_ELEMENTS:
        return RenderedCard(card=whole, shown=tuple(ask.id for ask in asks), overflow=(), size=size, elements=elements)
    # The most forms that fit, in order (a later ask never jumps ahead of one that does not fit):
    # fitting only gets harder with more forms, so search for the count.
    floor = truncate(view.content or "", CONTENT_FLOOR_CHARS)
    low, high = 0, len(forms)  # forms[:low] fits (no forms always does)
    while low < high:
        middle = (low + high + 1) // 2
        if fits(_assemble(view, forms[:middle], len(forms) - middle + more, floor)):
            low = middle
        else:
            high = middle - 1
    overflow = asks[low:]
    card = _fit_content(view, forms[:low], len(overflow) + more)
    return RenderedCard(
        card=card,
        shown=tuple(ask.id for ask in asks[:low]),
        overflow=tuple(ask.id for ask in overflow),
        size=card_size(card),
        elements=count_elements(card),
    )


def callback_response(toast_type: str, text: str, card: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The body a ``card.action.trigger`` callback answers with (reference §2.4)."""
    if toast_type not in ("info", "success", "error", "warning"):
        raise ValueError(f"toast type must be info, success, error or warning, not {toast_type!r}")
    body: dict[str, Any] = {"toast": {"type": toast_type, "content": text}}
    if card is not None:
        body["card"] = {"type": "raw", "data": card}
    return body
