"""Claude Code's ``Elicitation`` hook (an MCP server's ``requestedSchema`` asked as a form): the
rules of each property — a number's bounds, an integer, a text's length and format (email, uri,
date, date-time), a multi-select's item count, a required value — are enforced when the person
submits, on every surface, with words saying what is wrong: the panel's ack, the Feishu card's
toast, the DingTalk card's private notice. An invalid value is never sent as ``accept``. A form
larger than the panel's is asked on a DingTalk card, which holds more; the person dismissing the
form (or an operator cancelling it) is answered ``cancel``."""
import asyncio
import json

import pytest
from channels.db import database_sync_to_async

from askcards import services
from askcards.models import Ask, AskEvent
from askcards.surfaces.dingtalk import cards as dingtalk_cards
from tests.consumers.test_panel import _panel
from tests.conftest import grant_bot, person
from tests.hosts.test_claude_code_hook import DINGTALK_URL, ELICIT, SESSION_URL, _open_ask, _post, present  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

RULES = {
    "type": "object", "required": ["email"], "properties": {
        "email": {"type": "string", "title": "Email", "format": "email"},
        "site": {"type": "string", "title": "Site", "format": "uri", "minLength": 12, "maxLength": 40},
        "count": {"type": "integer", "title": "Count", "minimum": 1, "maximum": 9},
    },
}
DATES = {
    "type": "object", "required": ["day", "at"], "properties": {
        "day": {"type": "string", "title": "Day", "format": "date"},
        "at": {"type": "string", "title": "At", "format": "date-time"},
        "ratio": {"type": "number", "title": "Ratio", "minimum": 0, "maximum": 1},
    },
}


def _event(schema):
    return {**ELICIT, "requested_schema": schema}


def _answers(ask, texts, *, response="提交", labels=None):
    """Each property written in 其他 (or ``labels`` chosen), and 回应."""
    answers = []
    for index, question in enumerate(ask.questions[:-1]):
        chosen = (labels or {}).get(index)
        text = texts[index] if index < len(texts) else None
        answers.append({"question": question["question"], "selectedLabels": chosen or ([] if text else ["留空"]),
                        "customInput": text})
    answers.append({"question": ask.questions[-1]["question"], "selectedLabels": [response], "customInput": None})
    return answers


async def _submit(ask, answers):
    return await database_sync_to_async(services.ask_answer)(ask_id=ask.id, answers=answers, surface="web")


@pytest.mark.parametrize("schema, texts, refused", [
    (RULES, ["bob"], "「Email」应为邮箱地址（如 name@example.com）。"),
    (RULES, ["bob@example.com", "example.com/page"], "「Site」应为完整网址（如 https://example.com/page）。"),
    (RULES, ["bob@example.com", "https://a.b"], "「Site」至少 12 个字。"),
    (RULES, ["bob@example.com", "https://example.com/" + "x" * 30], "「Site」至多 40 个字。"),
    (RULES, ["bob@example.com", None, "0"], "「Count」应不小于 1。"),
    (RULES, ["bob@example.com", None, "10"], "「Count」应不大于 9。"),
    (RULES, ["bob@example.com", None, "2.5"], "「Count」应为整数。"),
    (RULES, [None], "「Email」为必填项，请填写后再提交。"),
    (DATES, ["2026-02-30", "2026-08-01T09:30:00+08:00"], "「Day」应为日期（年-月-日，如 2026-08-01）。"),
    (DATES, ["2026-08-01", "2026-08-01 09:30"], "「At」应为日期时间（如 2026-08-01T09:30:00+08:00，须带时区）。"),
    (DATES, ["2026-08-01", "2026-08-01T25:00Z"], "「At」应为日期时间（如 2026-08-01T09:30:00+08:00，须带时区）。"),
    (DATES, ["2026-08-01", "2026-08-01T09:30Z", "1.5"], "「Ratio」应不大于 1。"),
    (DATES, ["2026-08-01", "2026-08-01T09:30Z", "half"], "「Ratio」应为数字。"),
])
async def test_a_value_its_rules_refuse_is_refused_on_submit_and_the_ask_stays_open(present, schema, texts, refused):
    _, key = present
    hook = asyncio.ensure_future(_post(SESSION_URL, key, _event(schema)).get_response(timeout=20))
    ask = await _open_ask()

    outcome = await _submit(ask, _answers(ask, texts))
    assert (outcome.accepted, outcome.reason, outcome.detail, outcome.notice) == (
        False, services.AnswerRefusal.INVALID, refused, refused)
    assert (await database_sync_to_async(Ask.objects.get)(pk=ask.id)).status == "pending"
    ignored = await database_sync_to_async(
        lambda: AskEvent.objects.filter(ask_id=ask.id, kind="ignored").values_list("detail", flat=True).first())()
    assert ignored == {"attempted": "invalid"}  # the audit names the refusal, never the value
    # Declining needs no valid values.
    assert (await _submit(ask, _answers(ask, texts, response="拒绝提供"))).accepted
    reply = json.loads((await hook)["body"])
    assert reply == {"hookSpecificOutput": {"hookEventName": "Elicitation", "action": "decline"}}


async def test_values_that_keep_their_rules_are_sent_typed(present):
    _, key = present
    for schema, texts, content in (
        (RULES, ["bob@example.com", "https://example.com/a", "9"],
         {"email": "bob@example.com", "site": "https://example.com/a", "count": 9}),
        # A date-time written with a space is sent with the T; a number keeps its fraction.
        (DATES, ["2026-08-01", "2026-08-01 09:30:15+08:00", "0.25"],
         {"day": "2026-08-01", "at": "2026-08-01T09:30:15+08:00", "ratio": 0.25}),
    ):
        hook = asyncio.ensure_future(_post(SESSION_URL, key, _event(schema)).get_response(timeout=20))
        ask = await _open_ask()
        # The question says what its answer must be.
        assert "格式：邮箱地址" in ask.questions[0]["question"] or "格式：日期" in ask.questions[0]["question"]
        outcome = await _submit(ask, _answers(ask, texts))
        assert outcome.accepted, (outcome.reason, outcome.detail)
        reply = json.loads((await hook)["body"])
        assert reply == {"hookSpecificOutput": {"hookEventName": "Elicitation", "action": "accept", "content": content}}


async def test_the_rules_show_in_the_questions(present):
    _, key = present
    hook = asyncio.ensure_future(_post(SESSION_URL, key, _event(RULES)).get_response(timeout=20))
    ask = await _open_ask()
    site, count = ask.questions[1]["question"], ask.questions[2]["question"]
    assert site == "Site\n格式：完整网址，如 https://example.com/page；长度 至少 12 个字，至多 40 个字；可不填"
    assert count == "Count\n整数（≥ 1 ≤ 9）；可不填"
    await database_sync_to_async(services.ask_cancel)(ask=ask, reason="host_gone", actor="test")
    await hook


MULTI = {"type": "object", "required": ["platforms"], "properties": {
    "platforms": {"type": "array", "title": "Platforms", "minItems": 1, "maxItems": 2,
                  "items": {"type": "string", "enum": ["feishu", "dingtalk", "web"],
                            "enumNames": ["Feishu", "DingTalk", "Web"]}}}}


async def test_a_multi_select_is_a_list_within_its_item_bounds(present):
    _, key = present
    hook = asyncio.ensure_future(_post(SESSION_URL, key, _event(MULTI)).get_response(timeout=20))
    ask = await _open_ask()
    question = ask.questions[0]
    assert question["multiSelect"] is True and [o["label"] for o in question["options"]] == ["Feishu", "DingTalk", "Web"]
    assert "可选 至少 1 项，至多 2 项" in question["question"]

    three = await _submit(ask, _answers(ask, [], labels={0: ["Feishu", "DingTalk", "Web"]}))
    assert three.notice == "「Platforms」至多选择 2 项。"
    words = await _submit(ask, _answers(ask, ["Slack"], labels={0: ["Web"]}))
    assert words.notice == "「Platforms」请从选项中选择。"  # words are no option's value
    assert (await _submit(ask, _answers(ask, [], labels={0: ["Web", "Feishu"]}))).accepted
    reply = json.loads((await hook)["body"])
    assert reply["hookSpecificOutput"]["content"] == {"platforms": ["web", "feishu"]}


# ------------------------------------------------------------------------------ the panel's ack

@pytest.fixture
def panel_surface(settings, agent_and_key):
    settings.ASKCARDS_SURFACES = ["askcards.surfaces.web.WebSurface"]
    return agent_and_key[1]


async def test_on_the_panel_the_ack_says_what_is_wrong(panel_surface):
    key = panel_surface
    panel = await _panel(await database_sync_to_async(person)("alice"))
    hook = asyncio.ensure_future(_post(SESSION_URL, key, _event(RULES)).get_response(timeout=20))
    shown = await panel.receive_json_from(timeout=5)
    assert shown["type"] == "ask_user_questions"
    ask = await database_sync_to_async(Ask.objects.get)(pk=shown["requestId"])
    await panel.send_json_to({"type": "ask_user_questions_result", "requestId": ask.id,
                              "answers": _answers(ask, ["bob@example.com", None, "12"])})
    ack = await panel.receive_json_from(timeout=5)
    # panel.js shows it as 「提交未被接受：「Count」应不大于 9。」
    assert ack == {"type": "ask_user_questions_ack", "requestId": ask.id, "ok": False,
                   "error": "invalid: 「Count」应不大于 9。"}
    await panel.send_json_to({"type": "ask_user_questions_result", "requestId": ask.id,
                              "answers": _answers(ask, ["bob@example.com", None, "3"])})
    assert (await panel.receive_json_from(timeout=5))["ok"] is True
    reply = json.loads((await hook)["body"])
    assert reply["hookSpecificOutput"]["content"] == {"email": "bob@example.com", "count": 3}
    await panel.disconnect()


# ------------------------------------------------------------------------------ a Feishu card

FEISHU_URL = "/hooks/claude-code?session=feishu-cli_elicit-private-ou_alice&bot=cli_elicit"


@pytest.fixture
def feishu_bot(agent_and_key, settings):
    from tests.feishu.integration import ENCRYPT_KEY, VERIFICATION_TOKEN

    settings.ASKCARDS_SURFACES = ["askcards.surfaces.feishu.surface.FeishuSurface"]
    agent, key = agent_and_key
    bot = services.bot_add(platform="feishu", app_id="cli_elicit", app_secret="secret", base_url="http://127.0.0.1:9",
                           verification_token=VERIFICATION_TOKEN, encrypt_key=ENCRYPT_KEY)
    grant_bot(agent, bot)
    return bot, key


def _feishu_submit(bot, ask, form_value, operator="ou_alice"):
    from tests.feishu.integration import click, submit_value

    response = click(bot, operator=operator, value=submit_value(ask), form_value=form_value, name="submit_0")
    assert response.status_code == 200
    return response.json()["toast"]


async def test_on_a_feishu_card_the_toast_says_what_is_wrong(feishu_bot):
    bot, key = feishu_bot
    hook = asyncio.ensure_future(_post(FEISHU_URL, key, _event(RULES)).get_response(timeout=20))
    ask = await _open_ask()
    assert ask.surfaces == ["feishu"]
    # Email written, Site left empty, Count 0; 回应: 提交 (each select's value is its option index).
    form = {"q0_0": "0", "c0_0": "bob@example.com", "q0_1": "1", "c0_1": "", "q0_2": "0", "c0_2": "0", "q0_3": "0"}
    toast = await database_sync_to_async(_feishu_submit)(bot, ask, form)
    assert toast == {"type": "warning", "content": "提交未被记录：「Count」应不小于 1。"}
    assert (await database_sync_to_async(Ask.objects.get)(pk=ask.id)).status == "pending"

    toast = await database_sync_to_async(_feishu_submit)(bot, ask, {**form, "c0_2": "4"})
    assert toast == {"type": "success", "content": "已提交"}
    reply = json.loads((await hook)["body"])
    assert reply["hookSpecificOutput"] == {"hookEventName": "Elicitation", "action": "accept",
                                           "content": {"email": "bob@example.com", "count": 4}}


async def test_on_a_feishu_card_someone_else_cannot_answer_a_host_prompt(feishu_bot):
    """A person the prompt was not asked of (not the session's user) clicks 提交: refused, and the
    prompt stays open for alice."""
    bot, key = feishu_bot
    hook = asyncio.ensure_future(_post(FEISHU_URL, key, _event(RULES)).get_response(timeout=20))
    ask = await _open_ask()
    form = {"q0_0": "0", "c0_0": "mallory@example.com", "q0_1": "1", "q0_2": "1", "q0_3": "0"}
    toast = await database_sync_to_async(_feishu_submit)(bot, ask, form, operator="ou_mallory")
    assert toast == {"type": "error", "content": "仅消息发送者可操作"}
    assert (await database_sync_to_async(Ask.objects.get)(pk=ask.id)).status == "pending"
    await database_sync_to_async(services.ask_cancel)(ask=ask, reason="host_gone", actor="test")
    assert json.loads((await hook)["body"]) == {}


# ------------------------------------------------------------------------------ a DingTalk card

async def _dingtalk_click(ask, form, user_id="staff_a", action="submit"):
    return await database_sync_to_async(services.dingtalk_click)(ask=ask, user_id=user_id, action=action, form=form)


async def test_on_a_dingtalk_card_the_refusal_says_what_is_wrong(present):
    _, key = present
    hook = asyncio.ensure_future(_post(DINGTALK_URL, key, _event(RULES)).get_response(timeout=20))
    ask = await _open_ask()
    assert ask.tool == "dingtalk_ask_user_question"
    # The rules stay askcards' own: the fields DingTalk renders carry none of them.
    assert all("check" not in field for field in json.loads(dingtalk_cards.card_variables(dingtalk_cards.CardState(
        question_id=ask.id, title=ask.title, description=ask.description, fields=ask.fields)).get("form"))["fields"])

    form = {"q0": "o0", "q0_other": "bob@example", "q1": "o1", "q2": "o1", "q3": "o0"}
    click = await _dingtalk_click(ask, form)
    assert (click.kind, click.reason, click.notice) == (
        services.ClickKind.REJECTED, services.ClickRefusal.INVALID, "「Email」应为邮箱地址（如 name@example.com）。")
    assert dingtalk_cards.notice(click.reason, click.notice) == "提交未被记录：「Email」应为邮箱地址（如 name@example.com）。"
    assert (await database_sync_to_async(Ask.objects.get)(pk=ask.id)).status == "pending"

    click = await _dingtalk_click(ask, {**form, "q0_other": "bob@example.com"})
    assert click.kind != "rejected", click
    reply = json.loads((await hook)["body"])
    assert reply["hookSpecificOutput"]["content"] == {"email": "bob@example.com"}


async def test_on_a_dingtalk_card_a_form_larger_than_the_panels_is_asked(present):
    """Five properties, one of six choices: more than the panel's form holds, a DingTalk form
    card holds it (a field per property and its 其他 box, and 回应)."""
    _, key = present
    properties = {f"f{n}": {"type": "string", "title": f"F{n}"} for n in range(4)}
    properties["size"] = {"type": "string", "title": "Size", "enum": ["XS", "S", "M", "L", "XL", "XXL"]}
    schema = {"type": "object", "required": ["size"], "properties": properties}
    hook = asyncio.ensure_future(_post(DINGTALK_URL, key, _event(schema)).get_response(timeout=20))
    ask = await _open_ask()
    assert len(ask.fields) == 12
    assert [o["text"] for o in ask.fields[8]["options"]] == ["XS", "S", "M", "L", "XL", "XXL"]
    form = {"q0": "o0", "q0_other": "zero", "q1": "o1", "q2": "o1", "q3": "o1", "q4": "o4", "q5": "o0"}
    click = await _dingtalk_click(ask, form)
    assert click.kind != "rejected", click
    reply = json.loads((await hook)["body"])
    assert reply["hookSpecificOutput"]["content"] == {"f0": "zero", "size": "XL"}


# ------------------------------------------------------------------------------ dismissed: cancel

async def test_the_person_dismissing_the_form_is_answered_cancel(present):
    """The DingTalk card's own cancel (the person dismissed it) and an operator's cancel are
    ``cancel`` — the MCP server reads "dismissed", and Claude Code shows no dialog of its own; the
    host giving up is no decision."""
    _, key = present
    hook = asyncio.ensure_future(_post(DINGTALK_URL, key, _event(RULES)).get_response(timeout=20))
    ask = await _open_ask()
    click = await _dingtalk_click(ask, None, action="cancel")
    assert click.kind != "rejected", click
    assert json.loads((await hook)["body"]) == {"hookSpecificOutput": {"hookEventName": "Elicitation", "action": "cancel"}}

    hook = asyncio.ensure_future(_post(SESSION_URL, key, _event(RULES)).get_response(timeout=20))
    ask = await _open_ask()
    await database_sync_to_async(services.ask_cancel)(ask=ask, reason="by_operator", actor="operator:admin")
    assert json.loads((await hook)["body"]) == {"hookSpecificOutput": {"hookEventName": "Elicitation", "action": "cancel"}}
    delivered = await database_sync_to_async(
        lambda: AskEvent.objects.get(ask_id=ask.id, kind="delivered").detail["decision"])()
    assert delivered == "cancel"

    hook = asyncio.ensure_future(_post(SESSION_URL, key, _event(RULES)).get_response(timeout=20))
    ask = await _open_ask()
    await database_sync_to_async(services.ask_cancel)(ask=ask, reason="host_gone", actor="system")
    assert json.loads((await hook)["body"]) == {}


async def test_a_permission_prompt_dismissed_is_still_no_decision(present):
    """Only an elicitation has a "dismissed" answer; a permission prompt cancelled on askcards
    leaves the choice to the terminal's own prompt (never an allow)."""
    _, key = present
    from tests.hosts.test_claude_code_hook import BASH

    hook = asyncio.ensure_future(_post(SESSION_URL, key, BASH).get_response(timeout=20))
    ask = await _open_ask()
    await database_sync_to_async(services.ask_cancel)(ask=ask, reason="by_operator", actor="operator:admin")
    assert json.loads((await hook)["body"]) == {}
