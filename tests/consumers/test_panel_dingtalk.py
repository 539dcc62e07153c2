"""DingTalk forms on the web panel (issue 13 point 3): the session's granted web user answers every
field type of ``dingtalk_ask_user_question`` in the browser, checked by the server as the card's
form would check it, first answer winning across card and panel, and a targeted collection
answered by the panel user for themselves only."""
from __future__ import annotations

import asyncio
import copy

import pytest
from channels.db import database_sync_to_async
from django.db import connections

from askcards import services
from askcards.models import Ask, AskEvent, OutboxEvent, Respondent
from tests.consumers.test_panel import _panel
from tests.conftest import grant_bot, person
from tests.dingtalk.integration import click, create, make_bot, private_view
from tests.fakes.dingtalk import FakeDingTalk

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

LUNCH = [{"value": "a", "text": "米饭"}, {"value": "b", "text": "面条"}, {"value": "c", "text": "饺子"}]
# One field of each of the 13 types, with groups, defaults, required and a hidden field.
FIELDS = [
    {"name": "code", "label": "代号", "type": "TEXT", "required": True, "placeholder": "请输入代号"},
    {"name": "note", "label": "备注", "type": "TEXT_AREA", "defaultValue": "无", "minRows": 2},
    {"name": "tags", "label": "标签", "type": "TEXT_ARRAY", "addText": "再加一个"},
    {"name": "count", "label": "人数", "type": "NUMBER", "required": True, "requiredMsg": "人数必须填写"},
    {"name": "dish", "label": "主食", "type": "SELECT", "options": LUNCH, "defaultValue": {"index": 1, "value": "b"}},
    {"name": "sides", "label": "配菜", "type": "MULTI_SELECT", "options": LUNCH},
    {"name": "day", "label": "日期", "type": "DATE", "defaultValue": "2024/05/27"},
    {"name": "at", "label": "时间", "type": "TIME"},
    {"name": "due", "label": "送达", "type": "DATETIME"},
    {"name": "agree", "label": "同意", "type": "CHECKBOX"},
    {"name": "spicy", "label": "要辣", "type": "SWITCH", "defaultValue": True},
    {"name": "drink", "label": "饮料", "type": "CHECKBOX_GROUP", "options": LUNCH, "required": True},
    {"name": "fruit", "label": "水果", "type": "MULTI_CHECKBOX_GROUP", "options": LUNCH},
    {"name": "trace", "label": "追踪", "type": "TEXT", "hidden": True, "defaultValue": "t-1"},
    {"name": "team", "label": "团队", "type": "TEXT", "readOnly": True, "defaultValue": "平台组"},
]
VALID = {
    "code": "DM-OK", "note": "第一行\n第二行", "tags": ["甲", "乙"], "count": 3, "dish": {"index": 0, "value": "a"},
    "sides": {"index": [1, 2], "value": ["b", "c"]}, "day": "2026-09-18", "at": "12:30", "due": "2026-09-18 12:30",
    "agree": True, "spicy": False, "drink": "c", "fruit": ["a", "b"],
}


@pytest.fixture
def fake():
    with FakeDingTalk() as server:
        yield server


@pytest.fixture
def world(settings, fake, agent):
    """alice's DingTalk conversation (she is staff_a there), shown on the card and her panel."""
    settings.ASKCARDS_SURFACES = ["askcards.surfaces.web.WebSurface", "askcards.surfaces.dingtalk.surface.DingTalkSurface"]
    bot = make_bot(fake)
    grant_bot(agent, bot)
    session, _ = services.session_upsert(
        agent=agent, key="dingtalk/dm/staff_a", platform="dingtalk", bot=bot, chat_type="p2p", user_id="staff_a",
        user_name="成员甲", web_user="alice",
    )
    return {"agent": agent, "bot": bot, "session": session, "alice": person("alice"), "bob": person("bob")}


@database_sync_to_async
def _form(world, fields=FIELDS, **extra):
    outcome, details = create(world["agent"], world["session"], {"title": "午餐登记", "description": "请填写", "fields": fields, **extra})
    assert outcome.status == "pending", details
    return outcome.ask


@database_sync_to_async
def _state(ask_id):
    ask = Ask.objects.get(pk=ask_id)
    rows = {row.respondent_id: (row.status, row.surface, row.answers) for row in ask.respondents.all()}
    return ask, rows


async def _submit(panel, ask_id, form, action="submit"):
    await panel.send_json_to({"type": "dingtalk_form_result", "requestId": ask_id, "action": action, "form": form})
    return await _next(panel, "dingtalk_form_ack")


async def _next(panel, kind):
    """The panel's next message of ``kind``; others heard meanwhile (an ending and its history
    entry arrive around the ack, in any order) are kept for later calls."""
    kept = panel.__dict__.setdefault("kept", [])
    for message in kept:
        if message["type"] == kind:
            kept.remove(message)
            return message
    while True:
        message = await panel.receive_json_from(timeout=10)
        if message["type"] == kind:
            return message
        kept.append(message)


def _click(bot, ask, user_id, **kwargs):
    try:
        return click(bot, ask, user_id, **kwargs)
    finally:
        connections.close_all()


# ------------------------------------------------------------------------------ what it shows


async def test_form_reaches_the_panel_with_its_fields_and_who_asks(world):
    panel = await _panel(world["alice"])
    ask = await _form(world)
    assert ask.surfaces == ["web", "dingtalk"]
    message = await panel.receive_json_from(timeout=5)
    assert message == {
        "type": "dingtalk_form", "requestId": ask.id, "sessionId": world["session"].id, "agent": "agent-a",
        "session": "钉钉私聊：成员甲", "title": "午餐登记", "description": "请填写", "fields": ask.fields,
        "targeted": False, "respondents": 1, "deadline": ask.deadline.isoformat(),
    }
    # Every field as given: types, groups, defaults, required, hidden and read-only flags.
    assert [(f["type"], f.get("defaultValue"), f.get("required")) for f in message["fields"]] == [
        (f["type"], f.get("defaultValue"), f.get("required")) for f in FIELDS
    ]
    await panel.disconnect()


async def test_form_is_listed_when_the_panel_opens_after_it_was_sent(world):
    ask = await _form(world)  # no panel open: the card alone decides it can be asked
    panel = await _panel(world["alice"])
    assert (await panel.receive_json_from(timeout=5))["requestId"] == ask.id
    await panel.disconnect()


async def test_another_user_never_sees_or_answers_the_form(world):
    ask = await _form(world)
    bob = await _panel(world["bob"])
    assert await bob.receive_nothing(timeout=0.2)
    ack = await _submit(bob, ask.id, VALID)
    assert (ack["ok"], ack["error"]) == (False, "not_found")
    assert (await _state(ask.id))[0].status == "pending"
    await bob.disconnect()


async def test_revoked_grant_hides_the_agents_forms(world):
    ask = await _form(world)
    await database_sync_to_async(services.agent_revoke)(agent=world["agent"], username="alice", actor="test")
    panel = await _panel(world["alice"])
    assert await panel.receive_nothing(timeout=0.2)
    ack = await _submit(panel, ask.id, VALID)
    assert (ack["ok"], ack["error"]) == (False, "not_found")
    await panel.disconnect()


# --------------------------------------------------------------------------- answering it


async def test_valid_form_of_every_type_is_recorded_and_the_agent_reads_it(world):
    panel = await _panel(world["alice"])
    ask = await _form(world)
    await panel.receive_json_from(timeout=5)
    ack = await _submit(panel, ask.id, VALID)
    assert (ack["ok"], ack["status"], ack["surface"]) == (True, "submitted", "web")
    ask, rows = await _state(ask.id)
    assert (ask.status, ask.reason) == ("answered", "submitted")
    assert rows["staff_a"][:2] == ("submitted", "web")
    answers = {item["question"]: item["answer"] for item in rows["staff_a"][2]["answers"]}
    assert answers == {
        "代号": "DM-OK", "备注": "第一行\n第二行", "标签": "甲, 乙", "人数": "3", "主食": "米饭", "配菜": "面条, 饺子",
        "日期": "2026-09-18", "时间": "12:30", "送达": "2026-09-18 12:30", "同意": "true", "要辣": "false",
        "饮料": "饺子", "水果": "米饭, 面条", "追踪": "t-1", "团队": "平台组",
    }
    assert ack["answers"] == rows["staff_a"][2]["answers"]
    assert ask.result["message"].startswith("用户回答了交互卡片:\n")
    assert "  - 主食: 米饭" in ask.result["message"]
    await panel.disconnect()


async def test_defaults_count_and_hidden_or_read_only_fields_keep_theirs(world):
    panel = await _panel(world["alice"])
    ask = await _form(world)
    await panel.receive_json_from(timeout=5)
    # What the page sends when the person fills the required fields and leaves the defaults: the
    # defaults as given (even a date not in the picker's format), hidden and read-only left out.
    form = {"code": "X", "count": 1, "drink": "a", "note": "无", "dish": {"index": 1, "value": "b"},
            "day": "2024/05/27", "spicy": True}
    ack = await _submit(panel, ask.id, form)
    assert ack["ok"], ack
    answers = {item["question"]: item["answer"] for item in ack["answers"]}
    assert answers == {"代号": "X", "备注": "无", "人数": "1", "主食": "面条", "日期": "2024/05/27", "要辣": "true",
                       "饮料": "米饭", "追踪": "t-1", "团队": "平台组"}
    await panel.disconnect()


REFUSED = [
    # (field, value sent, what the person reads)
    ("code", 7, "「代号」应为文本。"),
    ("note", ["多行"], "「备注」应为文本。"),
    ("tags", "甲", "「标签」应为文本列表。"),
    ("count", "三个", "「人数」应为数字。"),
    ("count", True, "「人数」应为数字。"),
    ("dish", "a", "「主食」的选择格式不正确。"),
    ("dish", {"index": 0, "value": "z"}, "「主食」的选项不在可选范围内。"),
    ("sides", {"index": [0], "value": "a"}, "「配菜」应为选项列表。"),
    ("sides", {"index": [0, 3], "value": ["a", "z"]}, "「配菜」的选项不在可选范围内。"),
    ("day", "18.09.2026", "「日期」应为日期（年-月-日）。"),
    ("day", "2026-02-30", "「日期」应为日期（年-月-日）。"),
    ("at", 1230, "「时间」应为文本。"),
    ("at", "25:00", "「时间」应为时间（时:分）。"),
    ("due", "2026-09-18T12:30", "「送达」应为日期时间（年-月-日 时:分）。"),
    ("agree", "yes", "「同意」应为是或否。"),
    ("spicy", 1, "「要辣」应为是或否。"),
    ("drink", ["a"], "「饮料」只能选择一项。"),
    ("drink", "z", "「饮料」的选项不在可选范围内。"),
    ("fruit", "a", "「水果」应为选项列表。"),
    ("fruit", ["a", "z"], "「水果」的选项不在可选范围内。"),
    ("code", None, "请填写「代号」。"),
    ("code", "   ", "请填写「代号」。"),
    ("count", None, "人数必须填写"),
    ("drink", None, "请选择「饮料」。"),
]


@pytest.mark.parametrize(("field", "value", "text"), REFUSED, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(REFUSED)])
async def test_a_form_the_card_would_refuse_is_refused_and_changes_nothing(world, field, value, text):
    panel = await _panel(world["alice"])
    ask = await _form(world)
    await panel.receive_json_from(timeout=5)
    form = copy.deepcopy(VALID)
    if value is None:
        form.pop(field)
    else:
        form[field] = value
    ack = await _submit(panel, ask.id, form)
    assert ack == {"type": "dingtalk_form_ack", "requestId": ask.id, "ok": False, "error": f"invalid: {text}", "field": field}
    state, rows = await _state(ask.id)
    assert (state.status, rows["staff_a"][0]) == ("pending", "pending")
    assert await database_sync_to_async(OutboxEvent.objects.filter(ask_id=ask.id, type="ask.closed").count)() == 0
    # ... and the same person can then answer properly.
    assert (await _submit(panel, ask.id, VALID))["ok"]
    await panel.disconnect()


async def test_a_form_that_is_not_an_object_is_refused(world):
    panel = await _panel(world["alice"])
    ask = await _form(world)
    await panel.receive_json_from(timeout=5)
    ack = await _submit(panel, ask.id, ["not", "an", "object"])
    assert ack["error"].startswith("invalid: 表单格式不正确")
    assert (await _state(ask.id))[0].status == "pending"
    await panel.disconnect()


async def test_unknown_fields_are_dropped_and_hidden_or_read_only_ones_keep_their_defaults(world):
    # The card's rule (tests/security/test_dingtalk_forms.py has each on both card transports).
    panel = await _panel(world["alice"])
    ask = await _form(world)
    await panel.receive_json_from(timeout=5)
    ack = await _submit(panel, ask.id, {**VALID, "extra": "x", "trace": "forged", "team": "别的组"})
    assert ack["ok"], ack
    answers = {item["question"]: item["answer"] for item in ack["answers"]}
    assert (answers["追踪"], answers["团队"], "extra" in answers) == ("t-1", "平台组", False)
    closed = await database_sync_to_async(AskEvent.objects.get)(ask_id=ask.id, kind="closed")
    assert closed.detail == {"reason": "submitted", "dropped_fields": ["extra"], "dropped_fields_count": 1,
                             "kept_defaults": ["trace", "team"], "kept_defaults_count": 2}
    await panel.disconnect()


async def test_question_dsl_form_needs_every_question_answered(world):
    panel = await _panel(world["alice"])
    questions = [{"question": "部署到哪个环境？", "header": "环境", "options": [{"label": "测试"}, {"label": "生产"}]},
                 {"question": "备注？", "header": "备注", "options": []}]
    outcome, _ = await database_sync_to_async(create)(world["agent"], world["session"], {"questions": questions})
    message = await panel.receive_json_from(timeout=5)
    assert [f["type"] for f in message["fields"]] == ["CHECKBOX_GROUP", "TEXT"]
    ack = await _submit(panel, outcome.ask.id, {"answer_1": "无"})
    assert (ack["error"], ack["field"]) == ("invalid: 请选择「环境」。", "answer_0")
    ack = await _submit(panel, outcome.ask.id, {"answer_0": "生产", "answer_1": "无"})
    assert ack["ok"]
    await panel.disconnect()


async def test_panel_cancel_is_the_cards_cancel(world):
    panel = await _panel(world["alice"])
    ask = await _form(world)
    await panel.receive_json_from(timeout=5)
    ack = await _submit(panel, ask.id, {}, action="cancel")
    assert (ack["ok"], ack["status"]) == (True, "cancelled")
    state, _ = await _state(ask.id)
    assert (state.status, state.reason) == ("cancelled", "by_respondent")
    assert state.result["message"].startswith("用户取消了交互卡片:\n")
    await panel.disconnect()


async def test_answer_after_the_card_answered_is_refused_and_the_panel_is_told(world):
    panel = await _panel(world["alice"])
    ask = await _form(world)
    await panel.receive_json_from(timeout=5)
    await asyncio.to_thread(_click, world["bot"], ask, "staff_a", form=VALID)
    told = await _next(panel, "ask_user_questions_cancelled")
    assert told == {"type": "ask_user_questions_cancelled", "requestId": ask.id, "reason": "submitted",
                    "surface": "dingtalk"}
    ack = await _submit(panel, ask.id, {**VALID, "code": "LATE"})
    assert (ack["ok"], ack["error"]) == (False, "not_pending")
    _, rows = await _state(ask.id)
    assert rows["staff_a"][1] == "dingtalk" and rows["staff_a"][2]["answers"][0]["answer"] == "DM-OK"
    await panel.disconnect()


async def test_card_and_panel_racing_have_exactly_one_winner(world):
    panel = await _panel(world["alice"])
    winners = []
    for _ in range(6):
        ask = await _form(world)
        await _next(panel, "dingtalk_form")
        ack, response = await asyncio.gather(
            _submit(panel, ask.id, {**VALID, "code": "PANEL"}),
            asyncio.to_thread(_click, world["bot"], ask, "staff_a", form={**VALID, "code": "CARD"}),
        )
        state, rows = await _state(ask.id)
        closed = await database_sync_to_async(AskEvent.objects.filter(ask_id=ask.id, kind="closed").count)()
        events = await database_sync_to_async(OutboxEvent.objects.filter(ask_id=ask.id, type="ask.closed").count)()
        assert (state.status, closed, events) == ("answered", 1, 1)
        code = rows["staff_a"][2]["answers"][0]["answer"]
        if ack["ok"]:
            assert (code, rows["staff_a"][1]) == ("PANEL", "web")
            assert private_view(response)["user_notice"] == "问题已失效，提交未被记录。"
            winners.append("panel")
        else:
            assert ack["error"] == "not_pending"
            assert (code, rows["staff_a"][1]) == ("CARD", "dingtalk")
            winners.append("card")
        assert f"  - 代号: {code}" in state.result["message"]
    await panel.disconnect()
    assert set(winners) <= {"panel", "card"} and len(winners) == 6


# ------------------------------------------------------------------- targeted collections


@database_sync_to_async
def _collection(world, respondents):
    outcome, details = create(
        world["agent"], world["session"],
        {"title": "午餐统计", "fields": FIELDS[:5],
         "target": {"type": "group", "id": "cid_lunch", "respondentUserIds": respondents}},
        sender_id="staff_a",
    )
    assert outcome.status == "pending", details
    return outcome.ask


async def test_collection_is_answered_by_the_panel_user_for_themselves_only(world):
    panel = await _panel(world["alice"])
    ask = await _collection(world, ["Staff_A", "staff_b"])
    shown = await panel.receive_json_from(timeout=5)
    assert (shown["type"], shown["targeted"], shown["respondents"]) == ("dingtalk_form", True, 2)
    ack = await _submit(panel, ask.id, {"code": "A", "count": 2})
    assert (ack["ok"], ack["status"]) == (True, "submitted")
    state, rows = await _state(ask.id)
    assert state.status == "pending"  # staff_b has not responded yet
    assert rows == {"Staff_A": ("submitted", "web", rows["Staff_A"][2]), "staff_b": ("pending", "", None)}
    # Her panel says she responded (every tab of hers), and a second try changes nothing.
    assert (await _next(panel, "dingtalk_form_responded"))["status"] == "submitted"
    again = await _submit(panel, ask.id, {"code": "B", "count": 9})
    assert (again["ok"], again["error"]) == (False, "already")
    # On the card, staff_a is told the first response counts; staff_b completes the collection.
    response = await asyncio.to_thread(_click, world["bot"], ask, "staff_a", form={"code": "C", "count": 1})
    assert private_view(response)["user_notice"] == "你已回应过本次收集，以第一次回应为准。"
    await asyncio.to_thread(_click, world["bot"], ask, "staff_b", form={"code": "B", "count": 5})
    told = await _next(panel, "ask_user_questions_cancelled")
    assert told["reason"] == "completed"
    state, rows = await _state(ask.id)
    assert (state.status, state.reason) == ("answered", "completed")
    assert [r["respondent_user_id"] for r in state.result["collection"]["responses"]] == ["Staff_A", "staff_b"]
    assert state.result["collection"]["responses"][0]["answers"][0] == {"question": "代号", "answer": "A"}
    # Her history keeps her own answers only, never staff_b's.
    added = await _next(panel, "history_add")
    assert added["ask"]["answers"] == [{"question": "代号", "answer": "A"}, {"question": "人数", "answer": "2"}]
    await panel.disconnect()


async def test_collection_not_asking_the_panel_user_is_neither_shown_nor_answerable(world):
    panel = await _panel(world["alice"])
    ask = await _collection(world, ["staff_b", "staff_c"])
    assert await panel.receive_nothing(timeout=0.3)
    ack = await _submit(panel, ask.id, {"code": "A", "count": 2})
    assert (ack["ok"], ack["error"]) == (False, "not_respondent")
    _, rows = await _state(ask.id)
    assert {status for status, _, _ in rows.values()} == {"pending"}
    await panel.disconnect()


async def test_collection_she_answered_on_the_card_is_not_listed_as_waiting(world):
    ask = await _collection(world, ["staff_a", "staff_b"])
    await asyncio.to_thread(_click, world["bot"], ask, "staff_a", form={"code": "A", "count": 2})
    panel = await _panel(world["alice"])
    assert await panel.receive_nothing(timeout=0.3)
    await panel.disconnect()


# ----------------------------------------------------------------------------------- history


async def test_history_lists_recent_asks_with_her_answers_newest_first(world):
    panel = await _panel(world["alice"])
    first = await _form(world)
    await _next(panel, "dingtalk_form")
    assert (await _submit(panel, first.id, VALID))["ok"]
    second = await _form(world)  # a newer question in the same conversation replaces none: the first is closed
    await _next(panel, "dingtalk_form")
    await database_sync_to_async(services.ask_cancel)(ask=second, actor="agent:test")
    await panel.disconnect()
    again = await _panel(world["alice"])
    items = again.history
    assert [item["requestId"] for item in items[:2]] == [second.id, first.id]
    assert items[0] | {"closedAt": None} == {
        "requestId": second.id, "sessionId": world["session"].id, "agent": "agent-a", "session": "钉钉私聊：成员甲",
        "title": "午餐登记", "status": "cancelled", "reason": "by_agent", "respondent": "", "surface": "",
        "closedAt": None, "purged": False, "answers": [],
    }
    assert items[1]["respondent"] == "submitted" and items[1]["surface"] == "web"
    assert {"question": "主食", "answer": "米饭"} in items[1]["answers"]
    await again.disconnect()


async def test_history_keeps_only_the_last_ten(world):
    for _ in range(12):
        ask = await _form(world)
        await database_sync_to_async(services.ask_cancel)(ask=ask, actor="agent:test")
    panel = await _panel(world["alice"])
    assert len(panel.history) == 10
    await panel.disconnect()


async def test_respondent_rows_record_the_panel_as_their_surface(world):
    panel = await _panel(world["alice"])
    ask = await _form(world)
    await panel.receive_json_from(timeout=5)
    await _submit(panel, ask.id, VALID)
    row = await database_sync_to_async(Respondent.objects.get)(ask_id=ask.id)
    audit = await database_sync_to_async(lambda: list(AskEvent.objects.filter(ask_id=ask.id, kind="closed").values_list("surface", flat=True)))()
    assert (row.surface, audit) == ("web", ["web"])
    await panel.disconnect()


async def test_a_form_is_never_closed_through_the_question_answer_message(world):
    panel = await _panel(world["alice"])
    ask = await _form(world)
    await panel.receive_json_from(timeout=5)
    await panel.send_json_to({"type": "ask_user_questions_result", "requestId": ask.id, "answers": VALID})
    ack = await _next(panel, "ask_user_questions_ack")
    assert (ack["ok"], ack["error"]) == (False, "invalid: this ask is a DingTalk form; answer it with dingtalk_form_result")
    # Nor by a caller of the seed's answer path handing it a form: only dingtalk_click closes it.
    outcome = await database_sync_to_async(services.ask_answer)(ask_id=ask.id, answers=VALID, surface="web")
    assert not outcome.accepted and outcome.reason is services.AnswerRefusal.INVALID
    assert (await _state(ask.id))[0].status == "pending"
    await panel.disconnect()


async def test_a_card_another_sender_owns_is_not_hers_to_answer(world):
    """In a group conversation the agent answers whoever wrote: a card owned by staff_x is staff_x's
    alone, so alice's panel (she is the session's user, staff_a) neither lists nor answers it."""
    group, _ = await database_sync_to_async(services.session_upsert)(
        agent=world["agent"], key="dingtalk/group/cid_team", platform="dingtalk", bot=world["bot"], chat_type="group",
        chat_id="cid_team", user_id="staff_a", web_user="alice",
    )
    panel = await _panel(world["alice"])
    theirs, _ = await database_sync_to_async(create)(world["agent"], group, {"fields": FIELDS[:1]}, sender_id="staff_x")
    assert await panel.receive_nothing(timeout=0.3)
    ack = await _submit(panel, theirs.ask.id, {"code": "A"})
    assert (ack["ok"], ack["error"]) == (False, "not_respondent")
    mine, _ = await database_sync_to_async(create)(world["agent"], group, {"fields": FIELDS[:1]}, sender_id="staff_a")
    shown = await _next(panel, "dingtalk_form")
    assert (shown["requestId"], shown["session"]) == (mine.ask.id, "钉钉群聊：dingtalk/group/cid_team")
    assert (await _state(theirs.ask.id))[0].status == "pending"
    await panel.disconnect()
