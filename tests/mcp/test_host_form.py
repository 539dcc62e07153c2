"""An ask as the host's form (``askcards.tools.host_form``): what the elicitation schema can hold of
``ask_user_questions`` and of DingTalk ``fields`` on each revision, what it cannot (that ask is
then not put to the host), and the host's content read back as the tool's answer."""
from __future__ import annotations

import pytest

from askcards.tools import host_form
from askcards.tools.dingtalk_ask_user_question import check_form, read_submission
from tests.conftest import QUESTIONS

DINGTALK = "dingtalk_ask_user_question"
MULTI = [dict(QUESTIONS[0], multiSelect=True)]
OPTIONS = [{"value": "a", "text": "甲"}, {"value": "b", "text": "乙"}]
CHOICES = [{"const": "a", "title": "甲"}, {"const": "b", "title": "乙"}]


def form(fields=None, questions=None, legacy=False):
    tool = DINGTALK if fields is not None else "ask_user_questions"
    return host_form.elicitation(tool=tool, questions=questions, fields=fields, title="标题", legacy=legacy)


def test_questions_on_2025_11_25_and_2025_06_18():
    modern = form(questions=QUESTIONS)
    assert modern["mode"] == "form"
    q1 = modern["requestedSchema"]["properties"]["q1"]
    assert q1["oneOf"][0] == {"const": "PostgreSQL", "title": "PostgreSQL"}
    legacy = form(questions=QUESTIONS, legacy=True)
    assert "mode" not in legacy  # 2025-06-18 has no modes
    assert legacy["requestedSchema"]["properties"]["q1"]["enum"] == ["PostgreSQL", "SQLite"]
    assert form(questions=MULTI)["requestedSchema"]["properties"]["q1"]["type"] == "array"
    assert form(questions=MULTI, legacy=True) is None  # 2025-06-18 has no arrays: not put to the host


@pytest.mark.parametrize("kind,expected", [
    ("TEXT", {"type": "string", "maxLength": 10_000}),
    ("TEXT_AREA", {"type": "string", "maxLength": 10_000}),
    ("NUMBER", {"type": "number"}),
    ("DATE", {"type": "string", "format": "date"}),
    ("CHECKBOX", {"type": "boolean"}),
    ("SWITCH", {"type": "boolean"}),
    ("SELECT", {"type": "string", "oneOf": CHOICES}),
    ("CHECKBOX_GROUP", {"type": "string", "oneOf": CHOICES}),
    ("MULTI_SELECT", {"type": "array", "items": {"anyOf": CHOICES}}),
    ("MULTI_CHECKBOX_GROUP", {"type": "array", "items": {"anyOf": CHOICES}}),
])
def test_each_dingtalk_field_the_schema_can_hold(kind, expected):
    field = {"name": "f", "label": "字段", "type": kind, "required": True, "options": OPTIONS}
    schema = form([field])["requestedSchema"]
    assert schema["properties"]["f"] == {"title": "字段", **expected}
    assert schema["required"] == ["f"]


@pytest.mark.parametrize("kind", ["TIME", "DATETIME", "TEXT_ARRAY"])
def test_a_form_with_a_field_the_schema_cannot_hold_is_not_put_to_the_host(kind):
    fields = [{"name": "ok", "label": "名称", "type": "TEXT"}, {"name": "f", "label": "字段", "type": kind}]
    assert form(fields) is None


def test_on_2025_06_18_a_dingtalk_single_select_is_an_enum_and_a_multi_select_cannot_be_asked():
    single = form([{"name": "f", "label": "字段", "type": "SELECT", "options": OPTIONS}], legacy=True)
    assert single["requestedSchema"]["properties"]["f"] == {"title": "字段", "type": "string", "enum": ["a", "b"],
                                                            "enumNames": ["甲", "乙"]}
    assert form([{"name": "f", "label": "字段", "type": "MULTI_SELECT", "options": OPTIONS}], legacy=True) is None


def test_hidden_and_read_only_fields_are_not_shown_and_defaults_are_carried():
    fields = [
        {"name": "h", "label": "隐藏", "type": "TEXT", "hidden": True, "defaultValue": "x"},
        {"name": "r", "label": "只读", "type": "TEXT", "readOnly": True, "defaultValue": "y"},
        {"name": "s", "label": "选择", "type": "SELECT", "defaultValue": {"index": 1, "value": "b"}, "options": OPTIONS},
        {"name": "n", "label": "数量", "type": "NUMBER", "defaultValue": "3"},  # not a number: no default
    ]
    properties = form(fields)["requestedSchema"]["properties"]
    assert list(properties) == ["s", "n"]
    assert properties["s"]["default"] == "b" and "default" not in properties["n"]


def test_the_hosts_content_reads_back_in_the_cards_value_shapes():
    fields = [
        {"name": "s", "label": "单选", "type": "SELECT", "options": OPTIONS},
        {"name": "m", "label": "多选", "type": "MULTI_SELECT", "options": OPTIONS},
        {"name": "g", "label": "组", "type": "CHECKBOX_GROUP", "options": OPTIONS},
        {"name": "n", "label": "数量", "type": "NUMBER"},
        {"name": "h", "label": "隐藏", "type": "TEXT", "hidden": True, "defaultValue": "x"},
    ]
    content = {"s": "b", "m": ["a", "b"], "g": "a", "n": 2, "h": "forged"}
    read = host_form.read(tool=DINGTALK, questions=None, fields=fields, content=content)
    assert read == {"s": {"index": 1, "value": "b"}, "m": {"index": [0, 1], "value": ["a", "b"]}, "g": "a", "n": 2}
    checked = check_form(fields, read)  # the card's own check takes it as a card's submit
    assert read_submission(fields, checked.form).answers[0] == {"question": "单选", "answer": "乙"}


@pytest.mark.parametrize("content", [{"s": "c"}, {"s": ["a", "b"]}, {"s": 1}, "text", None])
def test_content_that_is_not_the_forms_is_refused(content):
    fields = [{"name": "s", "label": "单选", "type": "SELECT", "options": OPTIONS}]
    with pytest.raises(host_form.FormContentError):
        host_form.read(tool=DINGTALK, questions=None, fields=fields, content=content)
