"""Agent hosts' hooks (``/hooks/claude-code``, ``/hooks/codex``) as an attacker would use them:
hostile event bodies get a clear error or no decision — never a 500, never an allow — and what a
card shows of a huge tool input stays bounded while the host gets its input back whole."""
import asyncio
import json

import pytest
from channels.db import database_sync_to_async

from askcards.models import Ask, AskEvent
from tests.hosts.test_claude_code_hook import BASH, SESSION_URL, _decided, _post, present  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


async def test_a_huge_tool_input_is_shown_bounded_and_returned_whole(present):  # noqa: F811
    _, key = present
    command = "echo " + "x" * 1_000_000  # a 1 MB command line
    event = {**BASH, "tool_input": {"command": command}}
    ask, reply = await _decided(key, event, [["允许"]])

    assert len(ask.questions[0]["question"]) <= 2000
    created = await database_sync_to_async(lambda: AskEvent.objects.get(ask_id=ask.id, kind="created"))()
    assert len(json.dumps(created.detail)) < 6000
    assert reply["hookSpecificOutput"]["decision"]["updatedInput"] == {"command": command}


BOTH, CLAUDE = ("claude-code", "codex"), ("claude-code",)


@pytest.mark.parametrize("event, hosts", [
    ({**BASH, "hook_event_name": 7}, BOTH),
    ({**BASH, "tool_name": ["Bash"]}, BOTH),
    ({**BASH, "tool_input": {"command": "ls\x00rm -rf /"}}, BOTH),
    # Claude Code's own questions and elicitations (Codex has neither: a tool named so is an approval).
    ({**BASH, "tool_name": "AskUserQuestion", "tool_input": {"questions": "pick one"}}, CLAUDE),
    ({**BASH, "tool_name": "AskUserQuestion", "tool_input": {"questions": [
        {"question": "x", "header": "h" * 40, "options": [{"label": "a"}, {"label": "b"}]}]}}, CLAUDE),
    ({**BASH, "hook_event_name": "Elicitation", "requested_schema": {"type": "object", "properties": {
        "blob": {"type": "object"}}}}, CLAUDE),
    ({**BASH, "hook_event_name": "Elicitation", "requested_schema": "anything"}, CLAUDE),
])
async def test_hostile_events_are_400_and_ask_nothing(present, event, hosts):  # noqa: F811
    _, key = present
    for host in hosts:
        response = await _post(SESSION_URL.replace("claude-code", host), key, event).get_response(timeout=10)
        assert response["status"] == 400, (host, response["body"])
        assert json.loads(response["body"])["error"]["message"]
    assert await database_sync_to_async(Ask.objects.count)() == 0


async def test_an_unknown_url_parameter_is_refused_before_anything_is_asked(present):  # noqa: F811
    _, key = present
    for query in ("&timeout=5", "&timeout=lots", "&session=twice", "&evil=1"):
        response = await _post(SESSION_URL + query, key, BASH).get_response(timeout=10)
        assert response["status"] == 400, query
    assert await database_sync_to_async(Ask.objects.count)() == 0
    await asyncio.sleep(0)
