"""An approval (允许 / 拒绝 with a reason / 本会话内允许) of what a tool wants to do, and the
host's own questions asked as they are, with the answer read back by question."""
from __future__ import annotations

import json
from typing import Any

from .prompt import (ALLOW, ALLOW_SESSION, DENY, DESCRIPTION_MAX, EXCERPT_CHARS, HEADER, QUESTION_MAX, Answer,
                     HostEventError, Prompt, context_line, excerpt)


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
