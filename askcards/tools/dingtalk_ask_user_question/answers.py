"""How a form answered outside DingTalk (the web panel) is checked before it counts.

The card's own form component enforces what a field declares (``required``, ``readOnly``,
``hidden``) in the DingTalk client, so a card callback only carries what the form lets through;
``request.submission_problem`` guards the shapes. An answer from the panel comes from our page, so
the server checks everything the card's form would have enforced: the same shapes and options
(``value_problem``, the card's rule), required fields filled, read-only and hidden fields left at
their defaults, dates and times in the card's formats, and only the form's own fields. The text of
a refusal is what the person reads (Chinese, naming the field by its label, never the value).
"""
from __future__ import annotations

import re
from datetime import date, datetime
from typing import Any

from .request import is_default, value_problem
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


def check_form(form_fields: list[dict[str, Any]], form: Any) -> dict[str, Any]:
    """``form`` (field name → value, the card's value shapes) if the card's form could have sent
    it: the form's own fields only, returned in field order; FormRefused otherwise."""
    if not isinstance(form, dict):
        raise FormRefused("表单格式不正确：应为“字段名 → 值”的对象。")
    names = {field["name"] for field in form_fields}
    unknown = sorted(key for key in form if key not in names)
    if unknown:
        raise FormRefused("表单中有此问题没有的字段，请刷新页面后重试。")
    checked: dict[str, Any] = {}
    for field in form_fields:
        name = field["name"]
        label = field.get("label") or name
        raw = form.get(name)
        default = default_of(field)
        if field.get("hidden") or field.get("readOnly"):
            if name in form and not (raw is None and default is None) and not is_default(field, raw):
                raise FormRefused(f"「{label}」不可修改。", name)
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
        checked[name] = raw
    return checked


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
