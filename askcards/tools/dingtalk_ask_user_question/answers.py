"""How a submitted form is checked before it counts: one rule for the card's callback and the
web panel (``check_form``).

The card's form component enforces what a field declares (``required``, ``readOnly``, ``hidden``)
in the DingTalk client, but a callback is only as good as its sender, and the panel is our own
page: so the server checks everything the card's form would have enforced, whichever way the
answer came — the value shapes and options (``value_problem``, reference §3), required fields
filled, dates and times in the card's formats, and the lengths every surface shares
(``ANSWER_TEXT_MAX_CHARS`` per value, ``ANSWER_MAX_CHARS`` per form), and the rules an agent host's
elicitation set on its fields (``answer_checks``). What fails is refused
(``FormRefused``: Chinese, naming the field by its label, never the value) and changes nothing.

Two things are not refused, because a person could not have caused them and refusing would only
lose what they did write:

- a hidden or read-only field sent with another value than its default: the person cannot edit
  such a field (on the card or the panel), so what arrived there is not theirs — a client's echo
  of the default in another shape, or a forged value. Its default is recorded, as the person saw
  it, and the field is named in the audit row (``CheckedForm.kept_defaults``);
- fields the form does not have: dropped, named in the audit row (``CheckedForm.unknown``), the
  rest of the answer accepted.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from .. import answer_checks
from ..base import ANSWER_MAX_CHARS, ANSWER_TEXT_MAX_CHARS, AnswerRefused
from .request import as_text, is_default, option_texts, value_problem
from .schema import OPTION_TYPES


class FormRefused(ValueError):
    """The answer is not one the card's form would send; ``str()`` is what the person reads and
    ``field`` names the field it is about ("" for the form as a whole)."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


# value_problem's reasons, as the person reads them after the field's label.
_PROBLEMS = {
    "expected true or false": "应为是或否",
    "expected a number": "应为数字",
    "expected a list of texts": "应为文本列表",
    "expected a text": "应为文本",
    "expected an object {index, value}": "的选择格式不正确",
    "expected a list of option values": "应为选项列表",
    "expected one option value": "只能选择一项",
    "a value is not one of the field's options": "的选项不在可选范围内",
}

# The formats the card's pickers send (reference §3).
_FORMATS = {
    "DATE": (re.compile(r"\d{4}-\d{2}-\d{2}"), "应为日期（年-月-日）"),
    "TIME": (re.compile(r"\d{2}:\d{2}(:\d{2})?"), "应为时间（时:分）"),
    "DATETIME": (re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}(:\d{2})?"), "应为日期时间（年-月-日 时:分）"),
}


def default_of(field: dict[str, Any]) -> Any:
    """The field's default (``defautValue`` is the reference's alias for the protocol's typo)."""
    return field.get("defaultValue", field.get("defautValue"))


def is_blank(raw: Any) -> bool:
    """Nothing chosen or written: absent, null, "", [] or a choice object without a value."""
    if isinstance(raw, dict):
        return "value" in raw and is_blank(raw["value"])
    if isinstance(raw, str):
        return raw.strip() == ""
    return raw is None or raw == []


# How many names of dropped or overridden fields an audit row lists (each cut to NAME_CHARS); the
# count is always whole.
AUDIT_NAMES = 20
NAME_CHARS = 64


@dataclass(frozen=True)
class CheckedForm:
    """A form as it is recorded: ``form`` (field name → value, in field order, the form's own
    fields only); ``unknown``: names sent that the form does not have (dropped); ``kept_defaults``:
    hidden or read-only fields sent with another value (their defaults recorded instead)."""

    form: dict[str, Any]
    unknown: tuple[str, ...] = ()
    kept_defaults: tuple[str, ...] = ()

    def audit_detail(self) -> dict[str, Any]:
        """What the answer's audit row says about what was not taken as sent (names, never values)."""
        detail: dict[str, Any] = {}
        for key, names in (("dropped_fields", self.unknown), ("kept_defaults", self.kept_defaults)):
            if names:
                detail[key] = [name[:NAME_CHARS] for name in names[:AUDIT_NAMES]]
                detail[f"{key}_count"] = len(names)
        return detail


def check_form(form_fields: list[dict[str, Any]], form: Any) -> CheckedForm:
    """``form`` (field name → value, the card's value shapes) as it is recorded, if the card's
    form could have sent it; FormRefused otherwise (see the module's docstring)."""
    if not isinstance(form, dict):
        raise FormRefused("表单格式不正确：应为“字段名 → 值”的对象。")
    names = {field["name"] for field in form_fields}
    unknown = tuple(sorted(str(key) for key in form if key not in names))
    checked: dict[str, Any] = {}
    kept: list[str] = []
    written = 0  # characters of free text, against ANSWER_MAX_CHARS
    for field in form_fields:
        name = field["name"]
        label = field.get("label") or name
        raw = form.get(name)
        default = default_of(field)
        if field.get("hidden") or field.get("readOnly"):
            if not is_blank(raw) and not is_default(field, raw):  # left blank is not another value
                kept.append(name)
            if default is not None:
                checked[name] = default
            continue
        if is_blank(raw):
            if field.get("required"):
                raise FormRefused(_required_text(field, label), name)
            continue
        if not is_default(field, raw):
            problem = value_problem(field, raw)
            if problem:
                raise FormRefused(f"「{label}」{_PROBLEMS.get(problem, '的值无效')}。", name)
            if field["type"] in _FORMATS and not _well_formed(field["type"], raw):
                raise FormRefused(f"「{label}」{_FORMATS[field['type']][1]}。", name)
            if field["type"] not in OPTION_TYPES:  # an option's value is the agent's, checked above
                texts = [as_text(item) for item in (raw if isinstance(raw, list) else [raw])]
                if any(len(text) > ANSWER_TEXT_MAX_CHARS for text in texts):
                    raise FormRefused(f"「{label}」超过 {ANSWER_TEXT_MAX_CHARS} 字，请精简后再提交。", name)
                written += sum(len(text) for text in texts)
                if written > ANSWER_MAX_CHARS:
                    raise FormRefused(f"回答合计超过 {ANSWER_MAX_CHARS} 字，请精简后再提交。", name)
        checked[name] = raw
    _enforce_checks(form_fields, checked)
    return CheckedForm(checked, unknown, tuple(kept))


def _enforce_checks(form_fields: list[dict[str, Any]], checked: dict[str, Any]) -> None:
    """The checks an agent host's elicitation put on its choice fields (``answer_checks``), each
    read with the words of the field's 其他 box (the check's ``other``)."""
    checked_fields = [field for field in form_fields if isinstance(field.get(answer_checks.KEY), dict)]
    if not checked_fields:
        return
    answers = []
    for field in checked_fields:
        other = field[answer_checks.KEY].get("other")
        answers.append((option_texts(field, checked.get(field["name"])), as_text(checked.get(other)) if other else ""))
    try:
        answer_checks.enforce([field[answer_checks.KEY] for field in checked_fields], answers)
    except AnswerRefused as refused:
        raise FormRefused(str(refused), checked_fields[refused.position]["name"]) from None


def _required_text(field: dict[str, Any], label: str) -> str:
    custom = field.get("requiredMsg")
    if isinstance(custom, str) and custom.strip():
        return custom.strip()
    return f"请选择「{label}」。" if field["type"] in OPTION_TYPES else f"请填写「{label}」。"


def _well_formed(kind: str, raw: Any) -> bool:
    """A text in the card's format for ``kind`` (value_problem already required a text)."""
    pattern, _ = _FORMATS[kind]
    text = str(raw).strip()
    if not pattern.fullmatch(text):
        return False
    try:
        if kind == "DATE":
            date.fromisoformat(text)
        elif kind == "TIME":
            datetime.strptime(text[:5], "%H:%M")
        else:
            datetime.strptime(text[:16], "%Y-%m-%d %H:%M")
    except ValueError:
        return False
    return True
