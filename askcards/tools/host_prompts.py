"""What a host's prompt becomes on askcards' surfaces, whatever the host: an approval (允许 / 拒绝
with a reason / 本会话内允许) or the host's own questions, as ``ask_user_questions`` arguments, and
the person's answer read back off that ask.

An approval shows what the tool wants to do the way a person can judge it: the command, the file
and a bounded excerpt of an edit, the URL of a fetch, an MCP tool and its arguments. The host, its
working directory and its session id head the question, so a person answering from a phone knows
which terminal is asking.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from . import answer_checks
from .ask_user_questions import INPUT_SCHEMA
from .base import AnswerRefused

ALLOW = "允许"
DENY = "拒绝"
ALLOW_SESSION = "本会话内允许"
HEADER = "权限请求"

# The ask_user_questions schema's bounds: what a question and an option description may hold.
_ITEM = INPUT_SCHEMA["properties"]["questions"]["items"]["properties"]
QUESTION_MAX = _ITEM["question"]["maxLength"]
DESCRIPTION_MAX = _ITEM["options"]["items"]["properties"]["description"]["maxLength"]
EXCERPT_CHARS = 1200  # of a command, a diff or arguments: a screenful a person can judge


@dataclass(frozen=True)
class Progress:
    """What a host's tool and turn events say on a Feishu session's progress card."""

    status: str  # the card's: running | completed
    title: str
    content: str
    # A tool that just ran (host session id, tool name, its input as the audit holds it):
    # its permission was given — in the terminal, if askcards still asks about it.
    settled: tuple[str, str, str] | None = None
    # The host's own session (Claude Code's session_id) whose turn ended (``completed``): its
    # prompts are withdrawn, another host session's on the same askcards session are not.
    host_session: str = ""


def summary(tool_name: str, tool_input: dict[str, Any]) -> str:
    """One line saying what a tool does (a progress card's text)."""
    key = {"Bash": "command", "Edit": "file_path", "MultiEdit": "file_path", "Write": "file_path",
           "Read": "file_path", "NotebookEdit": "notebook_path", "WebFetch": "url", "WebSearch": "query",
           "Grep": "pattern", "Glob": "pattern"}.get(tool_name)
    what = str(tool_input.get(key) or "") if key else ""
    what = " ".join(what.split())
    return f"{tool_name} · {excerpt(what, 120)}" if what else tool_name


class HostEventError(ValueError):
    """The host's event is not one askcards can ask about; ``str(error)`` says why (a 400)."""


@dataclass(frozen=True)
class Prompt:
    """What to ask, and what the host's decision needs back."""

    kind: str  # "permission" | "questions" | "elicitation"
    questions: list[dict[str, Any]]  # ask_user_questions' ``questions``
    audit: dict[str, Any]  # the host's context and the exact tool input shown (bounded), for the audit row
    tool_input: dict[str, Any] = field(default_factory=dict)
    host_questions: tuple[str, ...] = ()  # "questions": the host's own question texts, by position
    suggestions: list[Any] | None = None  # "permission": what 本会话内允许 answers with
    fields: tuple["Field", ...] = ()  # "elicitation": the requested schema's properties, by question
    checks: tuple[dict[str, Any] | None, ...] = ()  # "elicitation": each question's answer_checks rules


@dataclass(frozen=True)
class Answer:
    """The person's answer to a prompt's ask, as the ask's result holds it."""

    answers: list[dict[str, Any]]  # ask_user_questions' answers: {question, selectedLabels, customInput}
    by: str = ""  # the respondent
    surface: str = ""

    def choice(self) -> tuple[str, str]:
        """An approval's (label chosen, the text written), "" for either that is missing."""
        first = self.answers[0] if self.answers else {}
        labels = first.get("selectedLabels") or []
        return (str(labels[0]) if labels else ""), str(first.get("customInput") or "").strip()


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + f"…（其余 {len(text) - limit} 个字符未显示）"


def diff(old: str, new: str, limit: int = EXCERPT_CHARS) -> str:
    """An edit as removed and added lines, each side an excerpt of half the room."""
    removed = "\n".join("- " + line for line in old.splitlines())
    added = "\n".join("+ " + line for line in new.splitlines())
    return f"{excerpt(removed, limit // 2)}\n{excerpt(added, limit // 2)}"


def _listed(value: Any) -> list[Any]:
    """A host's list as a list; anything else (a number, a text, an object where a list belongs) as
    no items: the event's shape is the host's, never trusted."""
    return value if isinstance(value, list) else []


def _arguments(value: Any) -> str:
    return excerpt(json.dumps(value, ensure_ascii=False, indent=1, sort_keys=True))


def describe_tool(tool_name: str, tool_input: dict[str, Any]) -> str:
    """What the tool wants to do, in words and an excerpt a person can judge."""
    def text(key: str) -> str:
        return str(tool_input.get(key) or "")

    if tool_name == "Bash":
        lines = [f"执行命令：\n{excerpt(text('command'))}"]
        if text("description"):
            lines.append(f"说明：{excerpt(text('description'), 300)}")
        return "\n".join(lines)
    if tool_name == "Edit":
        every = "（全部替换）" if tool_input.get("replace_all") else ""
        return f"编辑文件{every}：{text('file_path')}\n{diff(text('old_string'), text('new_string'))}"
    edits = tool_input.get("edits")
    if tool_name == "MultiEdit" and isinstance(edits, list) and all(isinstance(e, dict) for e in edits):
        share = EXCERPT_CHARS // max(1, min(len(edits), 4))
        shown = [diff(str(e.get("old_string", "")), str(e.get("new_string", "")), share) for e in edits[:4]]
        more = f"\n…（另有 {len(edits) - 4} 处）" if len(edits) > 4 else ""
        return f"编辑文件（{len(edits)} 处）：{text('file_path')}\n" + "\n".join(shown) + more
    if tool_name == "Write":
        return f"写入文件：{text('file_path')}\n{excerpt(text('content'))}"
    if tool_name == "NotebookEdit":
        return f"编辑笔记本：{text('notebook_path')}\n{excerpt(text('new_source'))}"
    if tool_name == "WebFetch":
        return f"访问网址：{excerpt(text('url'), 500)}\n{excerpt(text('prompt'), 300)}".rstrip()
    if tool_name == "WebSearch":
        return f"搜索：{excerpt(text('query'), 500)}"
    if tool_name.startswith("mcp__"):
        server, _, name = tool_name[len("mcp__"):].partition("__")
        return f"调用 MCP 工具：{server} / {name or '?'}\n参数：{_arguments(tool_input)}"
    return f"使用工具 {tool_name}\n参数：{_arguments(tool_input)}"


def context_line(host: str, cwd: str, session_id: str) -> str:
    parts = [host]
    if cwd:
        parts.append(f"目录 {excerpt(cwd, 200)}")
    if session_id:
        parts.append(f"会话 {excerpt(session_id, 60)}")
    return " · ".join(parts)


def describe_suggestions(suggestions: list[Any]) -> str | None:
    """本会话内允许's description: the rules it adds, in the host's own words; None when one of
    them is not of a shape askcards can put in words (then the option is not offered: nobody
    allows for a whole session what they could not read)."""
    said: list[str] = []
    for item in suggestions:
        said_of = _suggestion_words(item if isinstance(item, dict) else {})
        if not said_of:
            return None
        said += said_of
    return excerpt(f"本会话内不再询问：{'、'.join(said)}", DESCRIPTION_MAX) if said else None


def _suggestion_words(item: dict[str, Any]) -> list[str]:
    """What one permission update does, in words; [] for one of another shape."""
    kind = item.get("type")
    if kind in ("addRules", "replaceRules"):
        rules = _listed(item.get("rules"))
        readable = [rule for rule in rules if isinstance(rule, dict) and _words(rule.get("toolName"))
                    and (rule.get("ruleContent") is None or _words(rule.get("ruleContent")))]
        if len(readable) != len(rules):
            return []
        return [f"{rule['toolName']}({rule['ruleContent']})" if rule.get("ruleContent") else rule["toolName"]
                for rule in readable]
    if kind == "setMode" and _words(item.get("mode")):
        return [f"模式 {item['mode']}"]
    directories = _listed(item.get("directories"))
    if kind == "addDirectories" and all(_words(d) for d in directories):
        return [f"目录 {d}" for d in directories]
    return []


def _words(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def approval(*, host: str, tool_name: str, tool_input: dict[str, Any], cwd: str, session_id: str,
             suggestions: list[Any] | None, audit: dict[str, Any]) -> Prompt:
    """An approval prompt: the question says what the tool wants to do and who asks."""
    head = context_line(host, cwd, session_id)
    body = describe_tool(tool_name, tool_input)
    question = f"{head}\n{body}"
    if len(question) > QUESTION_MAX:
        question = question[:QUESTION_MAX - 1] + "…"
    options = [
        {"label": ALLOW, "description": "只允许这一次"},
        {"label": DENY, "description": "可在「其他」里写明理由，智能体会读到"},
    ]
    described = describe_suggestions(suggestions) if suggestions else None
    if described is not None:
        options.append({"label": ALLOW_SESSION, "description": described})
    return Prompt(kind="permission", questions=[{"question": question, "header": HEADER, "options": options}],
                  audit=audit, tool_input=tool_input, suggestions=suggestions if described is not None else None)


def host_questions(*, host: str, questions: Any, cwd: str, session_id: str, tool_input: dict[str, Any],
                   audit: dict[str, Any]) -> Prompt:
    """The host's own questions (Claude Code's ``AskUserQuestion``: the same shape as
    ``ask_user_questions``), asked as they are; the first says which host asks. Checked by the
    ask tool itself when the ask is made."""
    if not isinstance(questions, list) or not questions or not all(isinstance(q, dict) for q in questions):
        raise HostEventError("tool_input.questions must be a non-empty list of question objects")
    texts = tuple(str(q.get("question", "")) for q in questions)
    shown = [dict(q) for q in questions]
    note = f"\n（{context_line(host, cwd, session_id)}）"
    if isinstance(shown[0].get("question"), str) and len(shown[0]["question"]) + len(note) <= QUESTION_MAX:
        shown[0]["question"] += note
    return Prompt(kind="questions", questions=shown, audit=audit, tool_input=tool_input, host_questions=texts)


def answers_by_question(prompt: Prompt, answer: Answer) -> dict[str, str]:
    """The host's question text → the person's answer: the labels chosen, then the 其他 text,
    joined by ", " (a multi-select's labels too)."""
    found: dict[str, str] = {}
    for index, text in enumerate(prompt.host_questions):
        item = answer.answers[index] if index < len(answer.answers) else {}
        parts = [str(label) for label in item.get("selectedLabels") or []]
        if item.get("customInput"):
            parts.append(str(item["customInput"]).strip())
        found[text] = ", ".join(part for part in parts if part)
    return found


# ------------------------------------------------------------------------------ elicitations
# An MCP server's request for input (``requestedSchema``: an object of flat properties) asked as
# ask_user_questions: one question per property, and a last one, 回应, to submit or decline. A
# choice (``enum``, ``oneOf`` of ``const``/``title``, an array of those: several) is options; a
# boolean is 是 / 否; text and numbers are written in 其他 (the options say so, and 留空 leaves an
# optional one out). Each question carries its property's rules (``answer_checks``: required, a
# number's bounds, an integer, a text's length and format, how many of a multi-select), checked
# when the person submits on any surface. The form's size is the surface's: Feishu and the panel
# hold ask_user_questions' four questions (three properties and 回应) of two to four options each,
# a DingTalk form card up to ten questions and any number of options; a schema larger than the
# session's surface holds is not asked here (no decision: the host asks in its own dialog).

SUBMIT = "提交"
DECLINE = "拒绝提供"
YES, NO = "是", "否"
WRITE = "填写（写在「其他」里）"
EMPTY = "留空"
MAX_FIELDS = 20  # beyond any surface's form: not asked (the DingTalk form's 20 fields hold 9)
MAX_CHOICES = 50
HEADER_MAX = _ITEM["header"]["maxLength"]
TEXT_TYPES = answer_checks.TEXT_KINDS


@dataclass(frozen=True)
class Field:
    """One property of a requested schema, as its question asks it."""

    name: str
    kind: str  # choice | choices | boolean | string | number | integer
    labels: tuple[tuple[str, Any], ...] = ()  # choice(s): label -> value
    required: bool = False
    default: Any = None
    check: dict[str, Any] = field(default_factory=dict)  # its answer_checks rules

    @property
    def defaulted(self) -> bool:
        return self.default not in (None, "", [])


def _choices(schema: dict[str, Any]) -> list[tuple[str, Any]] | None:
    values, given = schema.get("enum"), schema.get("enumNames")
    if isinstance(values, list):
        names: list[Any] = given if isinstance(given, list) else []
        return [(str(names[i]) if i < len(names) else str(value), value) for i, value in enumerate(values)]
    for key in ("oneOf", "anyOf"):
        if isinstance(schema.get(key), list) and all(isinstance(o, dict) and "const" in o for o in schema[key]):
            return [(str(o.get("title") or o["const"]), o["const"]) for o in schema[key]]
    return None


def _field(name: str, schema: Any, required: bool) -> Field:
    if not isinstance(schema, dict):
        raise HostEventError(f"requested_schema.properties.{name} must be an object")
    kind = schema.get("type")
    found: list[tuple[str, Any]] | None
    if kind == "array":
        items = schema.get("items")
        found = _choices(items) if isinstance(items, dict) else None
        if found is None:
            raise HostEventError(f"requested_schema.properties.{name}: an array must list its choices (items.enum)")
        kind = "choices"
    elif (found := _choices(schema)) is not None:
        kind = "choice"
    elif kind == "boolean":
        found = [(YES, True), (NO, False)]
    elif kind not in TEXT_TYPES:
        raise HostEventError(f"requested_schema.properties.{name}: type {kind!r} cannot be asked as a form here")
    title = str(schema.get("title") or "").strip() or name
    default = schema.get("default")
    check: dict[str, Any] = {"title": excerpt(title, 60), "kind": kind, "required": required,
                             "default": default not in (None, "", [])}
    if found:
        check["labels"] = [excerpt(label, 200) for label, _ in found]
    else:
        check["empty"] = EMPTY
    if schema.get("format") in answer_checks.FORMATS and kind == "string":
        check["format"] = schema["format"]
    for key, valid in (("minimum", answer_checks.bound), ("maximum", answer_checks.bound),
                       ("minLength", answer_checks.count), ("maxLength", answer_checks.count),
                       ("minItems", answer_checks.count), ("maxItems", answer_checks.count)):
        if valid(schema.get(key)) is not None:
            check[key] = schema[key]
    return Field(name, str(kind), tuple(found or ()), required, default, check)


def _question(wanted: Field, schema: dict[str, Any]) -> dict[str, Any]:
    """The property's question: its title, description and every rule the answer must keep."""
    title, check = wanted.check["title"], wanted.check
    notes = [str(schema.get("description") or "")]
    if "format" in check:
        notes.append(f"格式：{answer_checks.FORMAT_HINT[check['format']]}")
    elif schema.get("format"):
        notes.append(f"格式：{schema['format']}")
    if wanted.kind in ("number", "integer"):
        bounds = [f"≥ {check['minimum']}" if "minimum" in check else "",
                  f"≤ {check['maximum']}" if "maximum" in check else ""]
        said = "整数" if wanted.kind == "integer" else "数字"
        notes.append(said + (f"（{' '.join(b for b in bounds if b)}）" if any(bounds) else ""))
    for low, high, unit, what in (("minLength", "maxLength", "个字", "长度"), ("minItems", "maxItems", "项", "可选")):
        limits = [f"至少 {check[low]} {unit}"] if low in check else []
        limits += [f"至多 {check[high]} {unit}"] if high in check else []
        if limits:
            notes.append(f"{what} {'，'.join(limits)}")
    if wanted.defaulted:
        notes.append(f"默认：{wanted.default}")
    notes.append("必填" if wanted.required else "可不填")
    text = f"{title}\n" + "；".join(n for n in notes if n)
    if wanted.labels:
        options = [{"label": label, "description": ""} for label in check["labels"]]
    else:
        options = [{"label": WRITE, "description": "在「其他」中写下回答"},
                   {"label": EMPTY, "description": "使用默认值" if wanted.defaulted else "不填写"}]
    header = title if len(title) <= HEADER_MAX else title[:HEADER_MAX - 1] + "…"
    return {"question": text[:QUESTION_MAX], "header": header, "options": options,
            "multiSelect": wanted.kind == "choices"}


RESPONSE_QUESTION = {"question": "提交这些回答，还是拒绝提供？", "header": "回应",
                     "options": [{"label": SUBMIT, "description": ""}, {"label": DECLINE, "description": ""}]}
RESPONSE_CHECK = {"role": answer_checks.RESPONSE, "decline": DECLINE}


def elicitation(*, host: str, server: str, message: str, schema: Any, cwd: str, session_id: str,
                audit: dict[str, Any]) -> Prompt | None:
    """An MCP server's elicitation as a form; HostEventError for a schema that is not one (not an
    object of flat properties of the kinds a form asks); None for a valid one larger than any
    surface here shows (no decision)."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        raise HostEventError("requested_schema must be an object schema with properties")
    listed = schema.get("required")
    required: list[Any] = listed if isinstance(listed, list) else []
    properties = schema["properties"]
    if not properties:
        raise HostEventError("requested_schema has no properties: there is nothing to ask")
    if len(properties) > MAX_FIELDS:
        return None
    fields = [_field(str(name), value, name in required) for name, value in properties.items()]
    if any(len(wanted.labels) > MAX_CHOICES for wanted in fields):
        return None
    questions = [_question(wanted, properties[wanted.name]) for wanted in fields]
    head = f"{context_line(host, cwd, session_id)} · MCP {excerpt(server, 60)}\n{excerpt(message, 600)}\n\n"
    questions[0]["question"] = (head + questions[0]["question"])[:QUESTION_MAX]
    questions.append(dict(RESPONSE_QUESTION))
    checks = (*(wanted.check for wanted in fields), RESPONSE_CHECK)
    return Prompt(kind="elicitation", questions=questions, audit=audit, fields=tuple(fields), checks=checks)


def elicitation_content(prompt: Prompt, answer: Answer) -> tuple[str, dict[str, Any] | None]:
    """(``accept`` with the content, ``decline``) for the person's answer, or ("", None) when it
    does not make a valid content (every surface refuses such a submit: this only guards an answer
    recorded otherwise); then no decision, and the host asks in its own dialog."""
    items = answer.answers
    last = items[len(prompt.fields)] if len(items) > len(prompt.fields) else {}
    if DECLINE in (last.get("selectedLabels") or []):
        return "decline", None
    given = [([str(label) for label in item.get("selectedLabels") or []], str(item.get("customInput") or "").strip())
             for item in items[:len(prompt.fields)]]
    try:
        answer_checks.enforce([wanted.check for wanted in prompt.fields], given)
        content: dict[str, Any] = {}
        for wanted, (labels, text) in zip(prompt.fields, given):
            value = _value(wanted, labels, text)
            if value is not None:
                content[wanted.name] = value
    except AnswerRefused:
        return "", None
    if len(given) < len(prompt.fields):
        return "", None
    return "accept", content


def _value(wanted: Field, labels: list[str], text: str) -> Any:
    """The property's value from its answer (already checked), None when it is left out."""
    if wanted.labels:
        mapping = dict(zip(wanted.check["labels"], (value for _, value in wanted.labels)))
        chosen = [mapping[label] for label in labels if label in mapping]
        if chosen:
            return chosen if wanted.kind == "choices" else chosen[0]
    elif text:
        return answer_checks.value_of(wanted.check, text)
    return wanted.default if wanted.defaulted else None


# ------------------------------------------------------------------------------- DingTalk forms
# A DingTalk session shows a prompt as a DingTalk form (dingtalk_ask_user_question's fields): each
# question a required choice (one or several) and an optional 其他 text, the questions' own texts in
# the card's description. The form's answers ({label, answer text}) read back as the
# ask_user_questions answers the decisions are made from.

OTHER = "其他（可选）"


def _labels(prompt: Prompt) -> list[str]:
    """Each question's field label: its header, numbered when two would read the same."""
    headers = [str(q.get("header") or f"问题 {i + 1}") for i, q in enumerate(prompt.questions)]
    return [f"{i + 1}. {h}" if headers.count(h) > 1 else h for i, h in enumerate(headers)]


def dingtalk_form(prompt: Prompt) -> dict[str, Any]:
    """``dingtalk_ask_user_question`` arguments for the prompt."""
    fields: list[dict[str, Any]] = []
    for index, (question, label) in enumerate(zip(prompt.questions, _labels(prompt))):
        options = [{"value": f"o{n}", "text": str(option["label"])} for n, option in enumerate(question["options"])]
        kind = "MULTI_CHECKBOX_GROUP" if question.get("multiSelect") else "CHECKBOX_GROUP"
        fields.append({"name": f"q{index}", "label": label, "type": kind, "required": True, "options": options})
        fields.append({"name": f"q{index}_other", "label": f"{label} · {OTHER}", "type": "TEXT_AREA"})
    description = "\n\n".join(str(q["question"]) for q in prompt.questions)
    title = str(prompt.questions[0].get("header") or HEADER)
    return {"title": title, "description": excerpt(description, 3000), "fields": fields}


def dingtalk_checks(prompt: Prompt) -> list[dict[str, Any] | None]:
    """The answer checks of ``dingtalk_form``'s fields: each question's on its choice field, read
    with the words of its 其他 box; none on the boxes themselves."""
    checks: list[dict[str, Any] | None] = []
    for index, check in enumerate(prompt.checks):
        checks += [{**check, "other": f"q{index}_other"} if check else None, None]
    return checks


def answers_from_form(prompt: Prompt, form_answers: Any) -> list[dict[str, Any]]:
    """The form's recorded answers (``[{question: field label, answer: text}]``) as
    ask_user_questions answers, by question."""
    said = {str(item.get("question")): str(item.get("answer") or "")
            for item in form_answers or [] if isinstance(item, dict)}
    answers = []
    for question, label in zip(prompt.questions, _labels(prompt)):
        known = [str(option["label"]) for option in question["options"]]
        chosen = said.get(label, "")
        # Option texts are joined by ", " in the record: the known labels it holds, in their order.
        picked = [text for text in known if text == chosen or text in chosen.split(", ")]
        other = said.get(f"{label} · {OTHER}", "").strip()
        answers.append({"question": question["question"], "selectedLabels": picked, "customInput": other or None})
    return answers
