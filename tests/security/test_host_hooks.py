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


async def test_a_multiedit_whose_edits_are_no_list_is_shown_as_it_came_and_never_500(present):  # noqa: F811
    """The audit's crash (``edits`` a number): both hosts ask with the tool's raw input shown — not
    "0 edits" — and allow it only on a person's 允许."""
    _, key = present
    event = {**BASH, "tool_name": "MultiEdit", "tool_input": {"file_path": "app.py", "edits": 5}}
    for path in (SESSION_URL, SESSION_URL.replace("claude-code", "codex")):
        ask, reply = await _decided(key, event, [["拒绝"]], path=path)
        text = ask.questions[0]["question"]
        assert "使用工具 MultiEdit" in text and '"edits": 5' in text and "编辑文件（0 处）" not in text
        assert reply["hookSpecificOutput"]["decision"]["behavior"] == "deny"
        await database_sync_to_async(Ask.objects.all().delete)()


@pytest.mark.parametrize("suggestions", [
    [{"type": "addDirectories", "directories": 5}],  # the audit's crash
    [{"type": "addDirectories", "directories": ["/srv", 5]}],
    [{"type": "addRules", "rules": 5, "behavior": "allow"}],
    [{"type": "addRules", "rules": [{"toolName": ["Bash"]}]}],
    [{"type": "setMode", "mode": "acceptEdits"}, {"type": "removeRules", "rules": [{"toolName": "Bash"}]}],
    ["addRules"],
])
async def test_a_session_rule_askcards_cannot_put_in_words_is_not_offered(present, suggestions):  # noqa: F811
    """本会话内允许 is offered only when every rule it would add can be read on the card."""
    _, key = present
    ask, reply = await _decided(key, {**BASH, "permission_suggestions": suggestions}, [["允许"]])
    assert [o["label"] for o in ask.questions[0]["options"]] == ["允许", "拒绝"]
    assert reply["hookSpecificOutput"]["decision"] == {"behavior": "allow", "updatedInput": BASH["tool_input"]}


async def test_every_rule_claude_code_suggests_is_named_on_the_option(present):  # noqa: F811
    _, key = present
    suggestions = [{"type": "addDirectories", "directories": ["/srv/shop"], "destination": "session"},
                   {"type": "setMode", "mode": "acceptEdits", "destination": "session"},
                   {"type": "addRules", "rules": [{"toolName": "Bash", "ruleContent": "make:*"}, {"toolName": "Read"}],
                    "behavior": "allow", "destination": "localSettings"}]
    ask, _ = await _decided(key, {**BASH, "permission_suggestions": suggestions}, [["拒绝"]])
    assert ask.questions[0]["options"][2] == {
        "label": "本会话内允许", "description": "本会话内不再询问：目录 /srv/shop、模式 acceptEdits、Bash(make:*)、Read"}


async def test_no_model_can_set_or_loosen_an_answers_rules(present):  # noqa: F811
    """The rules an elicitation puts on its answers are set by askcards from the host's event: a
    model's ask_user_questions (or dingtalk_ask_user_question) arguments have no place for them."""
    agent, _ = present
    from askcards import services
    from tests.conftest import QUESTIONS

    session = await database_sync_to_async(services.session_upsert)(
        agent=agent, key="web/alice", platform="web", web_user="alice", user_id="alice")
    forged = [{**QUESTIONS[0], "check": {"kind": "integer", "title": "x", "required": False}}]
    outcome = await database_sync_to_async(services.tool_call)(
        agent=agent, session=session[0], name="ask_user_questions", arguments={"questions": forged})
    assert outcome.ask is None and "check" in outcome.tool_result
    assert await database_sync_to_async(Ask.objects.count)() == 0
