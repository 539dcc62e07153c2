"""The headless permission-prompt tool over MCP, against a real ``serve`` with the official SDK's
client (as ``claude -p --permission-prompt-tool mcp__askcards__permission_prompt`` calls it): listed
only when the URL asks for it, answered on the web panel, returned in the contract's JSON text;
anything but a person's 允许 — nobody to ask, no answer in time — is a denial, and the client going
away withdraws the ask."""
from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
import requests
from mcp import MCPError

from askcards.hosts import prompt_tool
from tests.mcp import support


PROMPT_URL = support.WEB_SESSION + "&permission_prompt=1"
BASH = {"tool_name": "Bash", "input": {"command": "git push --force"}, "tool_use_id": "toolu_01"}
TIMEOUT_META = "io.askcards/timeout_seconds"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with support.seeded(tmp_path_factory.mktemp("prompt-tool")) as (base, seed):
        yield base, seed["key"], support.login_cookie(base)


def run(scenario):
    async def bounded():
        async with asyncio.timeout(90):
            return await scenario()
    return asyncio.run(bounded())


async def _call_answered(base, key, cookie, labels, custom=None):
    async with support.Panel.open(base, cookie) as panel, support.client(base, key, PROMPT_URL) as mcp:
        call = asyncio.ensure_future(mcp.call_tool("permission_prompt", BASH))
        shown = await panel.next_ask()
        question = shown["questions"][0]
        answers = [{"question": question["question"], "selectedLabels": labels, "customInput": custom}]
        await panel.socket.send(json.dumps({"type": "ask_user_questions_result", "requestId": shown["requestId"],
                                            "answers": answers}))
        result = await call
        return question, json.loads(result.content[0].text)


def test_the_tool_is_listed_only_when_the_url_asks_for_it(served):
    base, key, _ = served

    async def scenario():
        async with support.client(base, key) as plain, support.client(base, key, PROMPT_URL) as prompting:
            return ([t.name for t in (await plain.list_tools()).tools],
                    [t.name for t in (await prompting.list_tools()).tools])

    plain, prompting = run(scenario)
    assert "permission_prompt" not in plain
    assert prompting == [*plain, "permission_prompt"]


def test_nobody_to_ask_is_a_denial_saying_so(served):
    """No panel open (and no card): nobody can be asked, so the tool denies at once. (Before any
    test of this module opens alice's panel: her presence must be gone for sure.)"""
    base, key, _ = served

    async def scenario():
        async with support.client(base, key, PROMPT_URL) as mcp:
            return json.loads((await mcp.call_tool("permission_prompt", BASH)).content[0].text)

    assert run(scenario) == {"behavior": "deny", "message": prompt_tool.NOBODY}


def test_allowed_on_the_panel_the_tool_says_allow_with_the_input(served):
    question, decision = run(lambda: _call_answered(*served, ["允许"]))
    assert "git push --force" in question["question"]
    assert decision == {"behavior": "allow", "updatedInput": BASH["input"]}


def test_denied_on_the_panel_the_reason_reaches_the_model(served):
    _, decision = run(lambda: _call_answered(*served, ["拒绝"], custom="main is protected"))
    assert decision["behavior"] == "deny" and decision["message"].endswith("main is protected")


def test_bad_arguments_are_a_denial_not_an_allow(served):
    base, key, _ = served

    async def scenario():
        async with support.client(base, key, PROMPT_URL) as mcp:
            return await mcp.call_tool("permission_prompt", {"tool_name": "Bash", "input": "rm -rf /"})

    result = run(scenario)
    decision = json.loads(result.content[0].text)
    assert decision["behavior"] == "deny" and "input" in decision["message"]


def test_ask_user_question_through_the_prompt_tool_is_asked_as_the_questions(served):
    """claude -p offers AskUserQuestion when a prompt tool is given, and asks the tool about it."""
    base, key, cookie = served
    questions = [{"question": "Which database?", "header": "Database", "multiSelect": False,
                  "options": [{"label": "PostgreSQL"}, {"label": "SQLite"}]}]

    async def scenario():
        async with support.Panel.open(base, cookie) as panel, support.client(base, key, PROMPT_URL) as mcp:
            call = asyncio.ensure_future(mcp.call_tool("permission_prompt", {
                "tool_name": "AskUserQuestion", "input": {"questions": questions}, "tool_use_id": "toolu_02"}))
            shown = await panel.next_ask()
            answers = [{"question": shown["questions"][0]["question"], "selectedLabels": ["SQLite"], "customInput": None}]
            await panel.socket.send(json.dumps({"type": "ask_user_questions_result", "requestId": shown["requestId"],
                                                "answers": answers}))
            return shown, json.loads((await call).content[0].text)

    shown, decision = run(scenario)
    assert shown["questions"][0]["header"] == "Database"
    assert decision == {"behavior": "allow", "updatedInput": {"questions": questions, "answers": {"Which database?": "SQLite"}}}


# ------------------------------------------------------------------- anything but 允许 is a denial

def test_no_answer_before_the_deadline_is_a_denial_and_the_panel_says_it_timed_out(served):
    base, key, cookie = served

    async def scenario():
        async with support.Panel.open(base, cookie) as panel, support.client(base, key, PROMPT_URL) as mcp:
            call = asyncio.ensure_future(mcp.call_tool("permission_prompt", BASH, meta={TIMEOUT_META: 2}))
            shown = await panel.next_ask()
            ended = await panel.receive("ask_user_questions_cancelled")  # nobody answers
            return shown, ended, json.loads((await call).content[0].text)

    shown, ended, decision = run(scenario)
    assert "git push --force" in shown["questions"][0]["question"]
    assert (ended["requestId"], ended["reason"]) == (shown["requestId"], "timeout")
    assert decision == {"behavior": "deny", "message": prompt_tool.UNANSWERED}


def test_the_client_going_away_withdraws_the_ask_from_the_panel(served):
    """``claude -p`` interrupted (or killed) while the prompt waits: its request goes, and the
    ask leaves alice's panel at once, with the reason she reads (nobody answers into a void)."""
    base, key, cookie = served

    async def scenario():
        async with support.Panel.open(base, cookie) as panel:
            async with support.client(base, key, PROMPT_URL) as mcp:
                call = asyncio.ensure_future(mcp.call_tool("permission_prompt", BASH))
                shown = await panel.next_ask()
                call.cancel()
                with contextlib.suppress(MCPError, asyncio.CancelledError):
                    await call
            ended = await panel.receive("ask_user_questions_cancelled")
            return shown, ended

    shown, ended = run(scenario)
    assert (ended["requestId"], ended["reason"]) == (shown["requestId"], "host_gone")
    response = requests.get(f"{base}/api/v1/asks/{shown['requestId']}", timeout=10,
                            headers={"Authorization": f"Bearer {key}"})
    assert (response.json()["status"], response.json()["reason"]) == ("cancelled", "host_gone")
