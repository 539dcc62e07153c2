"""Issue 10.3: a DingTalk submit whose choice is not among its field's options, or whose value has
the wrong type for its field, is not something the card sends: it is refused, the clicker's card
says so (its private user_notice, in the words the panel uses for the same form), the ask stays
pending, and a real answer afterwards counts."""
from __future__ import annotations

import json

import pytest

from askcards.management.commands.askcards_dingtalk_stream import handle_sync
from askcards.models import Ask, AskEvent, Respondent
from askcards.tools import dingtalk_ask_user_question as dt
from tests.dingtalk.integration import (
    FIELDS, QUESTIONS, click, create, out_track_id, private_view,
)
from tests.fakes.dingtalk import callback_payload
from tests.dingtalk.conftest import bot, dingtalk_surface, fake, session  # noqa: F401  (the DingTalk fixtures)

pytestmark = pytest.mark.django_db(transaction=True)

REFUSED = "提交未被记录："  # askcards' own text, not the reference's; the panel's reason follows
MULTI = [{"question": "要哪些环境？", "header": "环境", "multiSelect": True,
          "options": [{"label": "测试"}, {"label": "生产"}]}]
EVERY_TYPE = [
    {"name": "count", "label": "人数", "type": "NUMBER"},
    {"name": "agree", "label": "同意", "type": "CHECKBOX"},
    {"name": "on", "label": "开启", "type": "SWITCH"},
    {"name": "day", "label": "日期", "type": "DATE"},
    {"name": "names", "label": "名单", "type": "TEXT_ARRAY"},
    {"name": "dishes", "label": "菜", "type": "MULTI_SELECT",
     "options": [{"value": "a", "text": "餐品甲"}, {"value": "b", "text": "餐品乙"}]},
    {"name": "size", "label": "份量", "type": "CHECKBOX_GROUP",
     "options": [{"value": "s", "text": "小"}, {"value": "l", "text": "大"}]},
    {"name": "extras", "label": "加料", "type": "MULTI_CHECKBOX_GROUP",
     "options": [{"value": "x", "text": "加蛋"}, {"value": "y", "text": "加面"}]},
]



def refused(response, ask) -> bool:
    notice = private_view(response)["user_notice"] if response.status_code == 200 else ""
    return (notice.startswith(REFUSED) and list(private_view(response)) == ["user_notice"]
            and "cardData" not in response.json() and Ask.objects.get(pk=ask.pk).status == "pending")


def test_a_choice_outside_the_options_is_refused_and_a_real_answer_counts_afterwards(agent, session, bot):
    outcome, _ = create(agent, session, {"fields": FIELDS, "title": "午餐"})

    response = click(bot, outcome.ask, "staff_a", form={"dish": {"index": 0, "value": "免费大餐"}, "note": "多加辣"})

    assert refused(response, outcome.ask)
    assert private_view(response)["user_notice"] == "提交未被记录：「午餐」的选项不在可选范围内。"
    event = AskEvent.objects.filter(ask=outcome.ask, kind="ignored").get()
    assert (event.detail, event.actor) == ({"attempted": "invalid"}, "respondent:staff_a")
    response = click(bot, outcome.ask, "staff_a", form={"dish": {"index": 1, "value": "b"}, "note": "多加辣"})
    assert private_view(response)["user_notice"] == ""
    ask = Ask.objects.get(pk=outcome.ask.pk)
    assert ask.status == "answered"
    assert ask.result["responses"][0]["answers"] == [{"question": "午餐", "answer": "餐品乙"},
                                                     {"question": "备注", "answer": "多加辣"}]


@pytest.mark.parametrize("questions, form", [
    (QUESTIONS, {"answer_0": "随便"}),  # single choice: not an option
    (QUESTIONS, {"answer_0": ["测试"]}),  # single choice: a list
    (MULTI, {"answer_0": "测试"}),  # multiple choice: a text where a list is expected
    (MULTI, {"answer_0": ["测试", "全部机器"]}),  # multiple choice: one value not an option
])
def test_a_question_answered_outside_its_options_or_with_the_wrong_type_is_refused(agent, session, bot,
                                                                                    questions, form):
    outcome, _ = create(agent, session, {"questions": questions})

    assert refused(click(bot, outcome.ask, "staff_a", form=form), outcome.ask)
    valid = {"answer_0": ["测试", "生产"] if questions is MULTI else "生产"}
    assert private_view(click(bot, outcome.ask, "staff_a", form=valid))["user_notice"] == ""
    assert Ask.objects.get(pk=outcome.ask.pk).status == "answered"


@pytest.mark.parametrize("name, value", [
    ("count", {"$gt": 0}), ("count", "许多"), ("count", True), ("count", "NaN"),
    ("agree", "true"), ("on", 1),
    ("day", ["2026-09-18"]),
    ("names", "甲"), ("names", ["甲", 2]),
    ("dishes", {"index": [0], "value": "a"}), ("dishes", ["a"]), ("dishes", {"index": [0], "value": ["a", "z"]}),
    ("size", {"value": "s"}), ("size", "m"),
    ("extras", "x"), ("extras", [{"value": "x"}]),
])
def test_a_field_given_a_value_of_the_wrong_type_is_refused(agent, session, bot, name, value):
    outcome, _ = create(agent, session, {"fields": EVERY_TYPE})

    assert refused(click(bot, outcome.ask, "staff_a", form={name: value}), outcome.ask)


def test_every_shape_the_card_sends_is_accepted(agent, session, bot):
    # Reference §3: the submitted value of each field type.
    outcome, _ = create(agent, session, {"fields": EVERY_TYPE})
    form = {"count": 0, "agree": True, "on": False, "day": "2026-09-18", "names": ["甲", "乙"],
            "dishes": {"index": [0, 1], "value": ["a", "b"]}, "size": "l", "extras": ["x", "y"]}

    response = click(bot, outcome.ask, "staff_a", form=form)

    assert private_view(response)["user_notice"] == ""
    answers = Ask.objects.get(pk=outcome.ask.pk).result["responses"][0]["answers"]
    assert [answer["answer"] for answer in answers] == ["0", "true", "false", "2026-09-18", "甲, 乙", "餐品甲, 餐品乙",
                                                        "大", "加蛋, 加面"]


def test_a_respondent_of_a_collection_is_refused_and_can_still_answer(agent, session, bot):
    target = {"type": "group", "id": "cid_team", "respondentUserIds": ["staff_b", "staff_c"]}
    outcome, _ = create(agent, session, {"fields": FIELDS, "title": "午餐", "target": target})

    response = click(bot, outcome.ask, "staff_b", form={"dish": {"index": 9, "value": "z"}})

    assert refused(response, outcome.ask)
    assert Respondent.objects.get(ask=outcome.ask, respondent_id="staff_b").status == "pending"
    click(bot, outcome.ask, "staff_b", form={"dish": {"index": 0, "value": "a"}})
    row = Respondent.objects.get(ask=outcome.ask, respondent_id="staff_b")
    assert row.status == "submitted" and row.answers["answers"] == [{"question": "午餐", "answer": "餐品甲"}]


def test_stream_mode_refuses_the_same_values(agent, session, bot):
    outcome, _ = create(agent, session, {"fields": FIELDS, "title": "午餐"})
    payload = callback_payload(out_track_id=out_track_id(outcome.ask), user_id="staff_a", question_id=outcome.ask.id,
                               form={"dish": {"index": 0, "value": "z"}})

    reply = handle_sync(bot.pk, json.dumps(payload))

    assert reply["userPrivateData"]["cardParamMap"] == {"user_notice": "提交未被记录：「午餐」的选项不在可选范围内。"}
    assert Ask.objects.get(pk=outcome.ask.pk).status == "pending"


def test_a_fields_own_default_value_is_accepted():
    fields = dt.form_fields_from_fields([{"name": "env", "label": "环境", "type": "TEXT", "defaultValue": 7}])
    assert dt.check_form(fields, {"env": 7}).form == {"env": 7}
    with pytest.raises(dt.FormRefused, match="「环境」应为文本。"):
        dt.check_form(fields, {"env": 8})
