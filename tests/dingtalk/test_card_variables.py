"""The DingTalk card: its variables over the whole lifecycle (reference §4)."""
from __future__ import annotations

import json

import pytest

from askcards.surfaces.base import SHORTENED_MARK
from askcards.surfaces.dingtalk.cards import (
    VALUE_MAX_BYTES,
    CardState,
    ClickRefusal,
    card_variables,
    changed_variables,
    notice,
    respondent_view,
    terminal_variables,
    values_json,
)
from askcards.tools.dingtalk_ask_user_question import Submission

FIELDS = [{"name": "answer_0", "label": "环境", "type": "CHECKBOX_GROUP", "required": True,
           "options": [{"value": "prod", "text": "生产"}, {"value": "test", "text": "测试"}]}]
Q_ID = "q_" + "1" * 32


def ordinary(**changes) -> CardState:
    return CardState(question_id=Q_ID, title="发布确认", description="发布到哪里？", fields=FIELDS, **changes)


def targeted(**changes) -> CardState:
    return ordinary(targeted=True, initiator="张三", timeout_minutes=30, total=3, **changes)


def test_new_card_shows_the_form_and_a_submit_badge():
    assert card_variables(ordinary()) == {
        "question_id": Q_ID,
        "question_title": "发布确认",
        "question_desc": "发布到哪里？",
        "card_status": "pending",
        "form_btn_text": "提交",
        "selected_text": "",
        "selected_values": "[]",
        "form": json.dumps({"fields": FIELDS}, ensure_ascii=False, separators=(",", ":"), sort_keys=True),
    }


def test_targeted_card_says_who_asked_who_may_answer_and_when_it_closes():
    assert card_variables(targeted())["question_desc"] == (
        "发布到哪里？\n由 张三 发起；仅指定填写人可提交。结果返回发起会话，30 分钟后截止；收齐即结束。"
    )


def test_targeted_progress_changes_only_the_badge():
    before = card_variables(targeted())
    after = card_variables(targeted(received=1, submission=Submission([{"question": "环境", "answer": "生产"}], ["prod"])))

    assert changed_variables(before, after) == {"form_btn_text": "1/3"}


def test_targeted_progress_never_shows_answers():
    variables = card_variables(targeted(received=2, submission=Submission([{"question": "环境", "answer": "秘密"}],
                                                                          ["secret-value"])))

    assert "秘密" not in json.dumps(variables, ensure_ascii=False)
    assert "secret-value" not in json.dumps(variables, ensure_ascii=False)
    assert variables["question_desc"].startswith("发布到哪里？\n由 张三 发起")


def test_targeted_card_without_responses_keeps_the_submit_badge():
    assert card_variables(targeted(received=0))["form_btn_text"] == "提交"


def test_submitted_card_shows_the_answers():
    submission = Submission([{"question": "环境", "answer": "生产"}, {"question": "备注", "answer": "今晚"}],
                            ["prod", "今晚"])

    variables = card_variables(ordinary(reason="submitted", submission=submission))

    assert (variables["card_status"], variables["question_desc"], variables["form_btn_text"]) == (
        "submitted", "已选择：生产, 今晚。", "已提交")
    assert variables["selected_text"] == "生产, 今晚"
    assert variables["selected_values"] == '["prod","今晚"]'


def test_submitted_card_whose_answers_are_gone_says_submitted():
    assert card_variables(ordinary(reason="submitted"))["question_desc"] == "已提交。"


def test_empty_submission():
    variables = card_variables(ordinary(reason="empty", submission=Submission([], [])))

    assert (variables["card_status"], variables["question_desc"], variables["form_btn_text"]) == (
        "submitted", "已提交，未填写任何内容。", "已提交")
    assert (variables["selected_text"], variables["selected_values"]) == ("", "[]")


@pytest.mark.parametrize("reason, status, desc, badge", [
    ("by_respondent", "cancelled", "已取消。", "已取消"),
    ("by_agent", "cancelled", "已取消。", "已取消"),
    ("by_operator", "cancelled", "已取消。", "已取消"),
    ("session_cancelled", "cancelled", "已取消。", "已取消"),
    ("timeout", "expired", "问题已失效，请重新发起。", "已失效"),
    ("superseded_by_question", "expired", "已有新的问题卡片，请回答最新卡片。", "已失效"),
    ("superseded_by_message", "expired", "你在问题卡片发出后发送了新消息，此卡已失效。请重新发起需要填写的问题。", "已失效"),
    ("pause_failed", "expired", "当前任务未能暂停，此卡已失效，请重新发起。", "已失效"),
    ("restart", "expired", "服务已重启，原问题上下文已失效，请重新发起。", "已失效"),
    ("dispatch_failed", "expired", "回答已收到，但未能继续会话，请发送一条普通消息继续。", "已失效"),
    ("delivery_failed", "expired", "问题卡片发送失败。", "已失效"),
])
def test_terminal_reason_texts(reason, status, desc, badge):
    variables = card_variables(ordinary(reason=reason))

    assert (variables["card_status"], variables["question_desc"], variables["form_btn_text"]) == (status, desc, badge)


def test_collection_complete_says_how_many_responded_and_shows_no_answers():
    submission = Submission([{"question": "环境", "answer": "秘密"}], ["x"])
    variables = card_variables(targeted(reason="completed", received=3, submission=submission))

    assert (variables["card_status"], variables["question_desc"], variables["form_btn_text"]) == (
        "submitted", "已收齐 3 人的回应，结果返回发起会话。", "已结束")
    assert "秘密" not in json.dumps(variables, ensure_ascii=False)


def test_initiator_cancel_of_a_collection():
    variables = card_variables(targeted(reason="by_agent", received=1))

    assert (variables["card_status"], variables["question_desc"], variables["form_btn_text"]) == (
        "cancelled", "发起人已取消本次收集。", "已取消")


def test_collection_deadline_expires_the_card():
    assert terminal_variables("timeout", targeted=True, total=3) == {
        "card_status": "expired", "question_desc": "问题已失效，请重新发起。", "form_btn_text": "已失效"}


def test_closing_changes_status_desc_and_badge_only():
    before = card_variables(ordinary())

    assert changed_variables(before, card_variables(ordinary(reason="by_respondent"))) == {
        "card_status": "cancelled", "question_desc": "已取消。", "form_btn_text": "已取消"}


def test_every_variable_is_a_string_in_every_state():
    states = [ordinary(), targeted(received=2), ordinary(reason="submitted", submission=Submission(
        [{"question": "a", "answer": "b"}], ["b"])), targeted(reason="completed")]

    for state in states:
        assert all(isinstance(value, str) for value in card_variables(state).values())


def test_nothing_pushed_yet_means_every_variable_changes():
    desired = card_variables(ordinary())

    assert changed_variables(None, desired) == desired


def test_unknown_reason_is_an_error():
    with pytest.raises(ValueError, match="no card texts"):
        card_variables(ordinary(reason="exploded"))


# -- what a card shows of a long answer (DingTalk allows about 1 KB per value) -----------------


def _fits(value: str) -> bool:
    return len(value.encode("utf-8")) <= VALUE_MAX_BYTES


def test_a_long_answer_is_shown_shortened_within_each_values_budget():
    long = "第一行\n" + "长" * 5000
    variables = terminal_variables("submitted", submission=Submission([{"question": "说明", "answer": long}], [long]))
    assert all(_fits(value) for value in variables.values())
    assert variables["question_desc"].startswith("已选择：第一行\n长") and variables["question_desc"].endswith(
        SHORTENED_MARK + "。")
    assert variables["selected_text"].endswith(SHORTENED_MARK) and long.startswith(
        variables["selected_text"][:-len(SHORTENED_MARK)])
    assert json.loads(variables["selected_values"])[0].endswith("…")


def test_an_answer_that_fits_is_shown_as_it_is():
    variables = terminal_variables("submitted", submission=Submission([{"question": "说明", "answer": "好"}], ["好"]))
    assert (variables["question_desc"], variables["selected_text"], variables["selected_values"]) == (
        "已选择：好。", "好", '["好"]')


@pytest.mark.parametrize("values", [
    ["短", "长" * 2000, "也短"],  # one long value: only it is cut
    ["长" * 400] * 5,  # several long ones: each cut alike
    ["项"] * 400,  # more values than fit even cut to nothing: the list ends early with "…"
    ["a\"\\\n" * 300],  # characters JSON escapes count as they are sent
])
def test_selected_values_is_json_within_the_budget_keeping_short_values_whole(values):
    shown = json.loads(values_json(values))
    assert _fits(values_json(values)) and isinstance(shown, list)
    kept = [value for value in shown if value != "…"]
    assert all(value == original or (value.endswith("…") and original.startswith(value[:-1]))
               for value, original in zip(kept, values))
    if len(values) == 3:
        assert (shown[0], shown[2]) == ("短", "也短")
    if len(values) == 400:
        assert 0 < len(shown) < 400 and shown[-1] == "…"


def test_a_respondents_own_view_and_the_notice_stay_within_budget():
    view = respondent_view("submitted", Submission([{"question": "说明", "answer": "长" * 3000}], ["长" * 3000]))
    assert _fits(view["question_desc"]) and view["question_desc"].startswith("你已提交：长")
    assert notice(ClickRefusal.INVALID, "「" + "很长的标签" * 200 + "」应为文本。").startswith("提交未被记录：「很长的标签")
    assert _fits(notice(ClickRefusal.INVALID, "「" + "很长的标签" * 200 + "」应为文本。"))
    assert (notice(None, ""), notice(ClickRefusal.CLOSED)) == ("", "问题已失效，提交未被记录。")
