"""MCP on the chat platforms: a real ``serve`` talking to the fake Feishu and DingTalk OpenAPI
servers (real HTTP on 127.0.0.1), driven by the official SDK's client.

- Feishu: ``ask_user_questions`` called over MCP on a Feishu private chat parks; its form reaches
  the person's progress card on Feishu; the signed card callback of their submit answers it and
  the MCP call (or, task-augmented, ``tasks/result``) returns the answer the REST API reports.
- DingTalk: ``dingtalk_ask_user_question`` answers at once with the card's details; the ask is a
  working task until the person submits the card (a signed DingTalk callback), after which the
  task is completed and its result is the message the agent would be handed as a new turn.
  ``action: list`` creates no ask, so it answers directly, also when the call asked for a task.

One server (both bots, one agent) is shared by the module.
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urlencode

import mcp_types as types
import pytest
import requests

from tests import serving
from tests.fakes.dingtalk import FakeDingTalk, signed_callback as dingtalk_callback
from tests.fakes.feishu import FakeFeishu, Message
from tests.feishu.helpers import forms
from tests.feishu.integration import ENCRYPT_KEY, VERIFICATION_TOKEN, signed_callback as feishu_callback
from tests.mcp import support

ASK_ID_META = "io.askcards/ask_id"
RELATED_TASK_META = "io.modelcontextprotocol/related-task"
DINGTALK_API_SECRET = "mcp-callback-api-secret"
DINGTALK_TOOL = "dingtalk_ask_user_question"
LIST = {"action": "list"}
DINGTALK_QUESTIONS = [{"question": "部署到哪个环境？", "header": "环境", "options": [{"label": "测试"}, {"label": "生产"}]}]
FEISHU_USER = "ou_alice"
DINGTALK_USER = "staff_a"
DINGTALK_SESSION = {
    "key": f"dingtalk/dm/{DINGTALK_USER}", "platform": "dingtalk", "chat_type": "p2p", "user_id": DINGTALK_USER
}

SEED = """
import json
from askcards import services
feishu = services.bot_add(platform="feishu", app_id={feishu_id!r}, app_secret={feishu_secret!r},
                          base_url={feishu_url!r}, verification_token={token!r}, encrypt_key={encrypt_key!r})
dingtalk = services.bot_add(platform="dingtalk", app_id={dingtalk_id!r}, app_secret={dingtalk_secret!r},
                            base_url={dingtalk_url!r}, api_secret={api_secret!r}, callback_mode="http")
agent, key = services.agent_create(name="mcp-platforms", bots=[feishu, dingtalk])
print(json.dumps({{"key": key}}))
"""


@dataclass
class World:
    base: str
    key: str
    feishu: FakeFeishu
    dingtalk: FakeDingTalk
    feishu_query: str
    dingtalk_query: str
    feishu_card: Message | None = None  # the Feishu progress card the forms are mounted on
    answered: set[str] = field(default_factory=set)  # Feishu asks submitted (a form may linger until the next PATCH)

    def rest(self, method: str, path: str, body: Any = None) -> dict:
        response = requests.request(
            method, f"{self.base}/api/v1{path}", json=body, headers={"Authorization": f"Bearer {self.key}"},
            timeout=support.TIMEOUT,
        )
        assert response.status_code < 300, response.text
        return response.json()


def _renamed(session: dict[str, str]) -> dict[str, str]:
    """A POST /api/v1/sessions body as MCP URL parameters (its ``key`` is ``session``)."""
    return {"session" if name == "key" else name: value for name, value in session.items()}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("mcp-platforms")
    with FakeFeishu() as feishu, FakeDingTalk() as dingtalk:
        env = serving.service_env(data_dir)
        serving.manage(env, "migrate", "-v0")
        seed = serving.shell_json(env, SEED.format(
            feishu_id=feishu.app_id, feishu_secret=feishu.app_secret, feishu_url=feishu.base_url,
            token=VERIFICATION_TOKEN, encrypt_key=ENCRYPT_KEY, dingtalk_id=dingtalk.client_id,
            dingtalk_secret=dingtalk.client_secret, dingtalk_url=dingtalk.base_url, api_secret=DINGTALK_API_SECRET,
        ))
        with serving.serve(env) as base:
            # DingTalk calls the cards back at the route askcards registers for the bot.
            serving.manage(env, "askcards_dingtalk_register", "--client-id", dingtalk.client_id,
                           "--url", f"{base}/callbacks/dingtalk/{dingtalk.client_id}/")
            feishu_key = f"feishu-{feishu.app_id}-private-{FEISHU_USER}"
            world = World(
                base=base, key=seed["key"], feishu=feishu, dingtalk=dingtalk,
                feishu_query=urlencode({"session": feishu_key, "bot": feishu.app_id}),
                dingtalk_query=urlencode({**_renamed(DINGTALK_SESSION), "bot": dingtalk.client_id}),
            )
            # An ask shows on Feishu as a form on the chat's running progress card, which the agent
            # keeps up through the REST API.
            session = world.rest("POST", "/sessions", {"key": feishu_key, "bot": feishu.app_id})
            progress = {"status": "running", "title": "Release 2.0", "content": "Tests are green"}
            world.rest("PUT", f"/sessions/{session['id']}/progress", progress)
            world.feishu_card = serving.until(lambda: next(iter(feishu.messages.values()), None), "the Feishu progress card", support.TIMEOUT)
            assert world.feishu_card.receive_id == FEISHU_USER
            yield world
            assert not feishu.rejections, feishu.rejections


async def _thread(function: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(function, *args)


async def _raw(mcp, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A request the SDK client has no typed call for (tasks), sent by its own dispatcher."""
    async with asyncio.timeout(support.TIMEOUT):
        return await mcp.session._dispatcher.send_raw_request(method, params, {})


# -------------------------------------------------------------------------------------- Feishu


def _feishu_form(world: World, ask_id: str | None = None) -> tuple[str, dict]:
    """The submit button of the ask's form on the person's card (a new ask's when ``ask_id`` is
    None); waits for the worker to PATCH it on."""

    def find():
        card = world.feishu_card.card
        for form in forms(card):
            for element in form["elements"]:
                if element["tag"] != "button":
                    continue
                value = element["behaviors"][0]["value"]
                if value["requestId"] == ask_id or (ask_id is None and value["requestId"] not in world.answered):
                    return value["requestId"], element
        return None

    return serving.until(find, f"the form of ask {ask_id or 'new'} on the Feishu card", support.TIMEOUT)


def _feishu_submit(world: World, button: dict, choice: str, note: str = "") -> dict:
    """The person picks option ``choice`` and presses submit: Feishu's signed, encrypted callback."""
    n = button["name"].rpartition("_")[2]
    world.answered.add(button["behaviors"][0]["value"]["requestId"])
    body, headers = feishu_callback(
        world.feishu.app_id, operator=FEISHU_USER, value=button["behaviors"][0]["value"], name=button["name"],
        message_id=world.feishu_card.message_id, form_value={f"q{n}_0": choice, f"c{n}_0": note},
    )
    response = requests.post(
        f"{world.base}/callbacks/feishu/{world.feishu.app_id}/", data=body,
        headers={**headers, "Content-Type": "application/json"}, timeout=support.TIMEOUT,
    )
    assert response.status_code == 200, response.text
    reply = response.json()
    assert reply["toast"]["type"] == "success", reply
    return reply


def test_feishu_blocking_call_is_answered_on_the_card(world):
    async def scenario():
        async with support.client(world.base, world.key, world.feishu_query) as mcp:
            listed = await mcp.list_tools()
            assert [tool.name for tool in listed.tools] == ["ask_user_questions"]
            call = asyncio.create_task(mcp.call_tool("ask_user_questions", {"questions": support.QUESTIONS}))
            try:
                ask_id, button = await _thread(_feishu_form, world, None)
                assert not call.done(), "the call returned before anyone answered"
                await _thread(_feishu_submit, world, button, "1")
                result = await asyncio.wait_for(call, support.TIMEOUT)
            finally:
                call.cancel()
        return ask_id, result

    ask_id, result = asyncio.run(scenario())
    assert result.is_error is False
    assert json.loads(result.content[0].text) == {"answers": [
        {"question": "Which database should we use?", "selectedLabels": ["SQLite"], "customInput": None}
    ]}
    ask = world.rest("GET", f"/asks/{ask_id}")
    assert ask["status"] == "answered" and ask["session"]["key"].startswith(f"feishu-{world.feishu.app_id}-private-")
    assert result.content[0].text == ask["result"]["tool_result"] == result.structured_content["tool_result"]
    assert result.structured_content["status"] == "answered" and result.structured_content["ask"]["id"] == ask_id
    assert result.meta[ASK_ID_META] == ask_id


def test_feishu_task_augmented_call_is_read_back_with_tasks_result(world):
    async def scenario():
        async with support.client(world.base, world.key, world.feishu_query) as mcp:
            arguments = {"questions": support.QUESTIONS}
            created = await _raw(mcp, "tools/call", {"name": "ask_user_questions", "arguments": arguments, "task": {}})
            task = created["task"]
            assert task["status"] == "working" and created["_meta"][ASK_ID_META] == task["taskId"]
            ask_id = task["taskId"]
            _, button = await _thread(_feishu_form, world, ask_id)
            assert (await _raw(mcp, "tasks/get", {"taskId": ask_id}))["status"] == "working"
            waiting = asyncio.create_task(_raw(mcp, "tasks/result", {"taskId": ask_id}))
            try:
                await asyncio.sleep(0.3)
                assert not waiting.done(), "tasks/result returned before anyone answered"
                await _thread(_feishu_submit, world, button, "0")
                result = await waiting
            finally:
                waiting.cancel()
            done = await _raw(mcp, "tasks/get", {"taskId": ask_id})
        return ask_id, result, done

    ask_id, result, done = asyncio.run(scenario())
    assert done["status"] == "completed"
    assert result["isError"] is False
    assert json.loads(result["content"][0]["text"]) == {"answers": [
        {"question": "Which database should we use?", "selectedLabels": ["PostgreSQL"], "customInput": None}
    ]}
    assert result["content"][0]["text"] == world.rest("GET", f"/asks/{ask_id}")["result"]["tool_result"]
    assert result["_meta"][RELATED_TASK_META] == {"taskId": ask_id}


# ------------------------------------------------------------------------------------ DingTalk


def _dingtalk_submit(world: World, details: dict, form: dict[str, Any]) -> dict:
    """What DingTalk POSTs to the registered route when the person submits the card."""
    fake = world.dingtalk
    route = fake.routes[fake.cards[details["outTrackId"]].create_body["callbackRouteKey"]]
    headers, body = dingtalk_callback(route["apiSecret"], out_track_id=details["outTrackId"], user_id=DINGTALK_USER,
                                      question_id=details["questionId"], form=form)
    response = requests.post(route["callbackUrl"], data=body, headers=headers, timeout=support.TIMEOUT)
    assert response.status_code == 200, response.text
    return response.json()


def test_dingtalk_create_answers_at_once_and_its_task_completes_with_the_later_message(world):
    async def scenario():
        async with support.client(world.base, world.key, world.dingtalk_query) as mcp:
            listed = await mcp.list_tools()
            assert [tool.name for tool in listed.tools] == [DINGTALK_TOOL]
            async with asyncio.timeout(support.TIMEOUT):
                created = await mcp.call_tool(DINGTALK_TOOL, {"questions": DINGTALK_QUESTIONS})
            details = json.loads(created.content[0].text)
            ask_id = created.meta[ASK_ID_META]
            working = await _raw(mcp, "tasks/get", {"taskId": ask_id})
            reply = await _thread(_dingtalk_submit, world, details, {"answer_0": "生产"})
            async with asyncio.timeout(support.TIMEOUT):
                while (done := await _raw(mcp, "tasks/get", {"taskId": ask_id}))["status"] == "working":
                    await asyncio.sleep(0.1)
            result = await _raw(mcp, "tasks/result", {"taskId": ask_id})
        return created, details, working, reply, done, result

    created, details, working, reply, done, result = asyncio.run(scenario())
    # create: the card is out and the call is over; the answer comes later.
    assert created.is_error is False
    assert details["status"] == "pending" and details["questionId"] == created.meta[ASK_ID_META]
    assert details["outTrackId"] in world.dingtalk.cards
    assert created.structured_content["status"] == "pending"
    assert created.structured_content["tool_result"] == created.content[0].text
    assert created.structured_content["ask"]["id"] == details["questionId"]
    ask_id = details["questionId"]
    assert working["taskId"] == ask_id and working["status"] == "working"
    # The person submits; the task completes and hands over the message the agent would be told.
    assert reply["cardData"]["cardParamMap"]["card_status"] == "submitted"
    assert done["status"] == "completed"
    ask = world.rest("GET", f"/asks/{ask_id}")
    assert ask["status"] == "answered"
    message = ask["result"]["message"]
    assert message == (
        f"用户回答了交互卡片:\n- question_id: {ask_id}\n- question_title: 环境\n"
        "- status: submitted\n- answers:\n  - 环境: 生产"
    )
    assert result["isError"] is False and result["content"][0]["text"] == message
    assert result["_meta"][RELATED_TASK_META] == {"taskId": ask_id}


def test_dingtalk_list_answers_directly_also_when_a_task_was_asked_for(world):
    async def scenario():
        async with support.client(world.base, world.key, world.dingtalk_query) as mcp:
            async with asyncio.timeout(support.TIMEOUT):
                plain = await mcp.call_tool(DINGTALK_TOOL, LIST)
            as_task = await _raw(mcp, "tools/call", {"name": DINGTALK_TOOL, "arguments": LIST, "task": {}})
        return plain, as_task

    plain, as_task = asyncio.run(scenario())
    # The same call through REST, on the session the MCP URL names.
    session = world.rest("POST", "/sessions", {**DINGTALK_SESSION, "bot": world.dingtalk.client_id})
    rest = world.rest("POST", "/tools/call", {"session": session["id"], "name": DINGTALK_TOOL, "arguments": LIST})
    assert plain.is_error is False and plain.content[0].text == rest["tool_result"]
    assert plain.structured_content["ask"] is None and ASK_ID_META not in (plain.meta or {})
    assert "task" not in as_task
    assert as_task["isError"] is False and as_task["content"] == [{"type": "text", "text": rest["tool_result"]}]
    assert as_task["structuredContent"] == {"status": rest["status"], "ask": None, "tool_result": rest["tool_result"]}


HOST_FIELDS = [
    {"name": "code", "label": "测试代号", "type": "TEXT", "required": True},
    {"name": "count", "label": "份数", "type": "NUMBER"},
    {"name": "env", "label": "环境", "type": "SELECT", "required": True,
     "options": [{"value": "test", "text": "测试"}, {"value": "prod", "text": "生产"}]},
    {"name": "days", "label": "哪几天", "type": "MULTI_CHECKBOX_GROUP",
     "options": [{"value": "mon", "text": "周一"}, {"value": "tue", "text": "周二"}]},
    {"name": "date", "label": "日期", "type": "DATE"},
    {"name": "urgent", "label": "加急", "type": "SWITCH", "defaultValue": False},
    {"name": "source", "label": "来源", "type": "TEXT", "hidden": True, "defaultValue": "mcp"},
]


def test_dingtalk_fields_are_put_to_the_host_and_its_answer_closes_the_card(world):
    """``host=ask`` on 2025-11-25: a DingTalk form's task is ``input_required`` and its
    ``tasks/result`` carries the fields as an elicitation schema; the host's answer is the card's
    submit (same checks), the task's result is the message the agent is told, and the card says
    where it was answered. A form with a field the schema cannot hold (TIME) is not put to it."""
    from tests.mcp.test_host_elicitation import host_client

    schemas: list[dict] = []

    async def on_form(ctx, params):
        schemas.append(params.requested_schema)
        return types.ElicitResult(action="accept", content={
            "code": "DM-OK", "count": 3, "env": "prod", "days": ["mon", "tue"], "date": "2026-09-18", "urgent": True})

    async def scenario():
        query = world.dingtalk_query + "&host=ask"
        async with host_client(world.base, world.key, query, on_form) as (mcp, _):
            created = await mcp.call_tool(DINGTALK_TOOL, {"title": "发布登记", "fields": HOST_FIELDS})
            assert created.meta is not None, created.content[0].text
            ask_id = created.meta[ASK_ID_META]
            asked = await _raw(mcp, "tasks/get", {"taskId": ask_id})
            result = await _raw(mcp, "tasks/result", {"taskId": ask_id})
            timed = await mcp.call_tool(DINGTALK_TOOL, {"fields": [{"name": "at", "label": "时间", "type": "TIME"}]})
            not_asked = await _raw(mcp, "tasks/get", {"taskId": timed.meta[ASK_ID_META]})
        return json.loads(created.content[0].text), asked, result, not_asked

    details, asked, result, not_asked = asyncio.run(scenario())
    assert asked["status"] == "input_required"
    (schema,) = schemas
    props = schema["properties"]
    assert list(props) == ["code", "count", "env", "days", "date", "urgent"]  # the hidden field is not shown
    assert (props["code"]["type"], props["count"]["type"], props["date"]["format"], props["urgent"]["type"]) == (
        "string", "number", "date", "boolean")
    assert props["env"]["oneOf"] == [{"const": "test", "title": "测试"}, {"const": "prod", "title": "生产"}]
    assert props["days"]["items"]["anyOf"][1] == {"const": "tue", "title": "周二"}
    assert schema["required"] == ["code", "env"] and props["code"]["title"] == "测试代号"
    message = result["content"][0]["text"]
    assert result["isError"] is False and message.startswith("用户回答了交互卡片:\n")
    assert "  - 环境: 生产" in message and "  - 哪几天: 周一, 周二" in message and "  - 份数: 3" in message
    ask = world.rest("GET", f"/asks/{details['questionId']}")
    assert ask["status"] == "answered" and ask["respondents"][0]["surface"] == "host"
    card = serving.until(
        lambda: (params := world.dingtalk.card_params(details["outTrackId"]))["card_status"] == "submitted" and params,
        "the card closed", support.TIMEOUT)
    assert card["question_desc"].startswith("已在 MCP 客户端回答：")
    assert not_asked["status"] == "working"
