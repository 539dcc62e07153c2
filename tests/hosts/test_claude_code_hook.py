"""``POST /hooks/claude-code`` through the real ASGI application: Claude Code's hook events become
asks on the session's surfaces, and the person's answer comes back in Claude Code's decision
shape; the host stopping to wait withdraws the ask; bad events change nothing."""
import asyncio
import json
from pathlib import Path

import pytest
from channels.db import database_sync_to_async
from channels.testing import ApplicationCommunicator, HttpCommunicator

from askcards import services
from askcards.models import Ask, AskEvent
from project.asgi import application
from tests.surfaces import RecordingSurface

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

SESSION_URL = "/hooks/claude-code?session=web/alice&platform=web&web_user=alice"
EVENTS = Path(__file__).parent / "events"  # as the pinned Claude Code sent them (capture_events.py)
BASH = {
    "session_id": "5f1c2d3e-claude", "transcript_path": "/tmp/t.jsonl", "cwd": "/home/alice/shop",
    "permission_mode": "default", "hook_event_name": "PermissionRequest", "tool_name": "Bash",
    "tool_input": {"command": "rm -rf build && make", "description": "Rebuild from scratch"},
}
SUGGESTION = [{"type": "addRules", "rules": [{"toolName": "Bash", "ruleContent": "make:*"}],
               "behavior": "allow", "destination": "session"}]
QUESTIONS = [
    {"question": "Which database should we use?", "header": "Database", "multiSelect": False,
     "options": [{"label": "PostgreSQL", "description": "server"}, {"label": "SQLite", "description": "file"}]},
    {"question": "Which platforms?", "header": "Platforms", "multiSelect": True,
     "options": [{"label": "Feishu", "description": ""}, {"label": "DingTalk", "description": ""},
                 {"label": "Web", "description": ""}]},
]


@pytest.fixture
def present(agent_and_key):
    """alice's panel is reachable for every session (the recording surface stands in for it)."""
    original = RecordingSurface.reachable
    RecordingSurface.reachable = lambda self, session, tool: True
    yield agent_and_key
    RecordingSurface.reachable = original


def _scope(path, key, raw):
    path, _, query = path.partition("?")
    headers = [(b"host", b"testserver"), (b"content-type", b"application/json"),
               (b"content-length", str(len(raw)).encode())]
    if key:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    return {"type": "http", "http_version": "1.1", "method": "POST", "path": path, "raw_path": path.encode(),
            "query_string": query.encode(), "headers": headers, "scheme": "http", "server": ("testserver", 80),
            "client": ("127.0.0.1", 5000)}


def _post(path, key, body):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return HttpCommunicator(application, "POST", path, body=raw, headers=_scope(path, key, raw)["headers"])


async def _open_ask(timeout=5.0):
    """The ask the hook made, once it is pending."""
    for _ in range(int(timeout / 0.05)):
        ask = await database_sync_to_async(lambda: Ask.objects.filter(status="pending").first())()
        if ask is not None:
            return ask
        await asyncio.sleep(0.05)
    raise AssertionError("the hook made no pending ask")


async def _answer(ask, labels, custom=None):
    answers = [{"question": q["question"], "selectedLabels": labels[i] if i < len(labels) else [],
                "customInput": custom if i == 0 else None} for i, q in enumerate(ask.questions)]
    outcome = await database_sync_to_async(services.ask_answer)(ask_id=ask.id, answers=answers, surface="web")
    assert outcome.accepted, (outcome.reason, outcome.detail)


async def _decided(key, event, labels, custom=None, path=SESSION_URL):
    hook = asyncio.ensure_future(_post(path, key, event).get_response(timeout=20))
    ask = await _open_ask()
    await _answer(ask, labels, custom)
    response = await hook
    assert response["status"] == 200, response["body"]
    return ask, json.loads(response["body"])


async def test_an_approved_command_is_allowed_with_its_input(present):
    agent, key = present
    ask, reply = await _decided(key, BASH, [["允许"]])

    assert reply == {"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                                            "decision": {"behavior": "allow", "updatedInput": BASH["tool_input"]}}}
    # The person saw what the command does and which terminal asks.
    question = ask.questions[0]
    assert question["header"] == "权限请求"
    assert "rm -rf build && make" in question["question"]
    assert "Claude Code" in question["question"] and "/home/alice/shop" in question["question"]
    assert [o["label"] for o in question["options"]] == ["允许", "拒绝"]
    # The audit names the exact input shown, and who allowed it where.
    rows = await database_sync_to_async(lambda: list(AskEvent.objects.filter(ask_id=ask.id).order_by("id")))()
    created = next(r for r in rows if r.kind == "created")
    assert created.detail["host"]["tool_name"] == "Bash"
    assert "rm -rf build" in created.detail["host"]["tool_input"]
    delivered = next(r for r in rows if r.kind == "delivered")
    assert (delivered.detail["decision"], delivered.detail["by"], delivered.surface) == ("allow", "alice", "web")


async def test_a_refusal_carries_the_persons_reason_to_the_model(present):
    _, key = present
    _, reply = await _decided(key, BASH, [["拒绝"]], custom="先别删 build，里面有手工改过的文件")

    decision = reply["hookSpecificOutput"]["decision"]
    assert decision["behavior"] == "deny"
    assert decision["message"].endswith("先别删 build，里面有手工改过的文件")
    assert "updatedInput" not in decision


async def test_allow_for_the_session_answers_with_the_hosts_suggestion(present):
    _, key = present
    event = {**BASH, "permission_suggestions": SUGGESTION}
    ask, reply = await _decided(key, event, [["本会话内允许"]])

    option = ask.questions[0]["options"][2]
    assert option["label"] == "本会话内允许" and "Bash(make:*)" in option["description"]
    decision = reply["hookSpecificOutput"]["decision"]
    assert decision == {"behavior": "allow", "updatedInput": BASH["tool_input"], "updatedPermissions": SUGGESTION}


async def test_allow_for_the_session_never_persists_a_rule(present):
    _, key = present
    lasting = [{**SUGGESTION[0], "destination": "localSettings"}]
    _, reply = await _decided(key, {**BASH, "permission_suggestions": lasting}, [["本会话内允许"]])
    assert reply["hookSpecificOutput"]["decision"]["updatedPermissions"] == SUGGESTION  # destination: session


async def test_an_edit_shows_the_file_and_a_bounded_diff(present):
    _, key = present
    event = {**BASH, "tool_name": "Edit", "tool_input": {
        "file_path": "/home/alice/shop/app.py", "old_string": "DEBUG = True\n" * 500, "new_string": "DEBUG = False"}}
    ask, _ = await _decided(key, event, [["允许"]])
    text = ask.questions[0]["question"]
    assert "编辑文件：/home/alice/shop/app.py" in text and "- DEBUG = True" in text and "+ DEBUG = False" in text
    assert len(text) <= 2000 and "未显示" in text


async def test_ask_user_question_is_answered_as_if_typed_in_the_terminal(present):
    _, key = present
    event = {**BASH, "tool_name": "AskUserQuestion", "tool_input": {"questions": QUESTIONS}}
    ask, reply = await _decided(key, event, [["SQLite"], ["Feishu", "Web"]], custom=None)

    assert [q["header"] for q in ask.questions] == ["Database", "Platforms"]
    decision = reply["hookSpecificOutput"]["decision"]
    assert decision["behavior"] == "allow"
    assert decision["updatedInput"] == {"questions": QUESTIONS, "answers": {
        "Which database should we use?": "SQLite", "Which platforms?": "Feishu, Web"}}


async def test_ask_user_question_answered_with_only_the_other_text_returns_that_text(present):
    """No label chosen, only 其他 written: the model reads the person's words as the answer."""
    _, key = present
    event = {**BASH, "tool_name": "AskUserQuestion", "tool_input": {"questions": QUESTIONS}}
    _, reply = await _decided(key, event, [[], ["Web"]], custom="MySQL 8，我们已经在用")

    decision = reply["hookSpecificOutput"]["decision"]
    assert decision["behavior"] == "allow"
    assert decision["updatedInput"] == {"questions": QUESTIONS, "answers": {
        "Which database should we use?": "MySQL 8，我们已经在用", "Which platforms?": "Web"}}


async def test_other_events_get_no_decision_and_ask_nothing(present):
    _, key = present
    for event in ({**BASH, "hook_event_name": "Notification", "message": "Claude needs your permission"},
                  {**BASH, "hook_event_name": "SomethingNewer"}):
        response = await _post(SESSION_URL, key, event).get_response(timeout=10)
        assert (response["status"], json.loads(response["body"])) == (200, {})
    assert await database_sync_to_async(Ask.objects.count)() == 0


@pytest.mark.parametrize("body, says", [
    (b"{not json", "JSON"),
    ([1, 2], "hook_event_name"),
    ({"tool_name": "Bash"}, "hook_event_name"),
    ({**BASH, "tool_input": "rm -rf /"}, "tool_input"),
    ({**BASH, "tool_name": "AskUserQuestion", "tool_input": {"questions": [
        {**QUESTIONS[0], "options": [{"label": str(n)} for n in range(6)]}]}}, "options"),
])
async def test_bad_events_are_refused_clearly_and_change_nothing(present, body, says):
    _, key = present
    response = await _post(SESSION_URL, key, body).get_response(timeout=10)
    assert response["status"] == 400, response["body"]
    error = json.loads(response["body"])["error"]
    assert error["code"] in ("invalid_input", "malformed_json") and says in error["message"]
    assert await database_sync_to_async(Ask.objects.count)() == 0


async def test_no_key_is_401_and_an_ungranted_user_403(present):
    _, key = present
    response = await _post(SESSION_URL, None, BASH).get_response(timeout=10)
    assert response["status"] == 401
    response = await _post("/hooks/claude-code?session=web/zed&platform=web&web_user=zed", key, BASH).get_response(timeout=10)
    assert response["status"] == 403 and json.loads(response["body"])["error"]["code"] == "web_user_not_granted"
    assert await database_sync_to_async(Ask.objects.count)() == 0


async def _given_up(path: str, key: str, event: dict) -> Ask:
    """Post the hook's event, wait until its prompt is asked, then close the request as Claude
    Code does when it stops waiting (Ctrl-C, its timeout); the ask once withdrawn."""
    raw = json.dumps(event).encode()
    host = ApplicationCommunicator(application, _scope(path, key, raw))
    await host.send_input({"type": "http.request", "body": raw, "more_body": False})
    ask = await _open_ask()
    await host.send_input({"type": "http.disconnect"})
    for _ in range(100):
        ask = await database_sync_to_async(Ask.objects.get)(pk=ask.id)
        if ask.status != "pending":
            break
        await asyncio.sleep(0.05)
    await host.wait(timeout=5)
    assert (ask.status, ask.reason) == ("cancelled", "host_gone")
    return ask


async def test_the_host_giving_up_withdraws_the_ask_everywhere(present):
    _, key = present
    ask = await _given_up(SESSION_URL, key, BASH)
    assert ("withdraw", ask.id) in [(hook, ask_id) for hook, ask_id, _ in RecordingSurface.calls]
    # A late answer is refused as for any ended ask.
    late = await database_sync_to_async(services.ask_answer)(
        ask_id=ask.id, answers=[{"question": ask.questions[0]["question"], "selectedLabels": ["允许"],
                                 "customInput": None}], surface="web")
    assert not late.accepted


async def test_the_wait_ends_with_no_decision_just_before_the_hosts_timeout(present, monkeypatch):
    from askcards.hosts import views

    _, key = present
    monkeypatch.setattr(views, "HOOK_MARGIN_SECONDS", 14)  # a 15 s hook: askcards answers after 1 s
    response = await _post(SESSION_URL + "&timeout=15", key, BASH).get_response(timeout=10)

    assert (response["status"], json.loads(response["body"])) == (200, {})
    ask = await database_sync_to_async(Ask.objects.get)()
    assert (ask.status, ask.reason) == ("cancelled", "host_gone")


async def test_a_prompts_deadline_is_the_urls_timeout_less_the_margin(present):
    """The card's deadline comes HOOK_MARGIN_SECONDS before the host would give up (the URL's
    ``timeout``), not at it: nobody is shown a prompt nobody waits for any more."""
    from askcards.hosts import views

    _, key = present
    raw = json.dumps(BASH).encode()
    host = ApplicationCommunicator(application, _scope(SESSION_URL + "&timeout=600", key, raw))
    await host.send_input({"type": "http.request", "body": raw, "more_body": False})
    ask = await _open_ask()

    assert views.HOOK_MARGIN_SECONDS == 5
    assert abs((ask.deadline - ask.created_at).total_seconds() - (600 - views.HOOK_MARGIN_SECONDS)) < 1
    await host.send_input({"type": "http.disconnect"})
    await host.wait(timeout=5)


# ------------------------------------------------------------------------------------- Codex

CODEX_URL = "/hooks/codex?session=web/alice&platform=web&web_user=alice"
CODEX_BASH = {"session_id": "019a-codex", "turn_id": "019a-turn", "cwd": "/home/alice/shop",
              "hook_event_name": "PermissionRequest", "model": "gpt-5", "permission_mode": "default",
              "tool_name": "Bash", "tool_input": {"command": "touch marker", "description": "make the marker"}}


async def test_codex_gets_exactly_its_own_decision_shape(present):
    _, key = present
    ask, allowed = await _decided(key, CODEX_BASH, [["允许"]], path=CODEX_URL)
    assert "Codex" in ask.questions[0]["question"] and "touch marker" in ask.questions[0]["question"]
    assert [o["label"] for o in ask.questions[0]["options"]] == ["允许", "拒绝"]
    assert allowed == {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}}}

    _, denied = await _decided(key, CODEX_BASH, [["拒绝"]], custom="不要碰 marker", path=CODEX_URL)
    decision = denied["hookSpecificOutput"]["decision"]
    assert set(decision) == {"behavior", "message"} and decision["behavior"] == "deny"
    assert decision["message"].endswith("不要碰 marker")


async def test_a_prompt_answered_the_moment_it_shows_still_decides(present, monkeypatch):
    """Someone quick answers the form as soon as a surface shows it, before the hook's request has
    even parked: the host still gets their decision, not "no decision"."""
    _, key = present

    def answer_at_once(self, ask):
        answers = [{"question": q["question"], "selectedLabels": ["允许"], "customInput": None} for q in ask.questions]
        assert services.ask_answer(ask_id=ask.id, answers=answers, surface="web").accepted

    monkeypatch.setattr(RecordingSurface, "show", answer_at_once)
    response = await _post(SESSION_URL, key, BASH).get_response(timeout=10)
    assert response["status"] == 200
    assert json.loads(response["body"])["hookSpecificOutput"]["decision"]["behavior"] == "allow"


async def test_codex_reads_no_decision_as_an_empty_body(present):
    _, key = present
    response = await _post(CODEX_URL, key, {**CODEX_BASH, "hook_event_name": "PreToolUse"}).get_response(timeout=10)
    assert (response["status"], response["body"]) == (204, b"")


async def test_a_waiter_that_died_with_its_process_lets_the_ask_lapse(present, monkeypatch):
    """A restart takes the host's request with it: no waiter refreshes the lease, and the worker
    withdraws the ask within the lease instead of leaving it answerable until its deadline."""
    from datetime import timedelta

    from django.utils import timezone


    from askcards.worker import Worker

    _, key = present
    monkeypatch.setattr(services, "WAITER_REFRESH_SECONDS", 0.2)
    hook = asyncio.ensure_future(_post(SESSION_URL, key, BASH).get_response(timeout=20))
    ask = await _open_ask()
    first = None
    for _ in range(50):  # bounded: 5 s; the lease is taken just after the ask is made
        first = (await database_sync_to_async(Ask.objects.get)(pk=ask.id)).waiter_until
        if first is not None:
            break
        await asyncio.sleep(0.1)
    assert first is not None, "the host's waiter took no lease on its ask"
    await asyncio.sleep(0.6)
    refreshed = (await database_sync_to_async(Ask.objects.get)(pk=ask.id)).waiter_until
    assert refreshed > first  # a live waiter keeps it

    # The process is gone: nothing refreshes the lease any more (let any refresh in flight finish),
    # the lease is let lapse (as 90 s without a refresh would), and the worker sweeps.
    monkeypatch.setattr(services, "waiters_alive", lambda **_: None)
    await asyncio.sleep(0.5)
    await database_sync_to_async(Ask.objects.filter(pk=ask.id).update)(waiter_until=timezone.now() - timedelta(seconds=1))
    assert await database_sync_to_async(Worker().deadlines)() == 1
    ask = await database_sync_to_async(Ask.objects.get)(pk=ask.id)
    assert (ask.status, ask.reason) == ("cancelled", "host_gone")
    response = await hook  # a request still open (a host that outlived the lease) hears no decision
    assert (response["status"], json.loads(response["body"])) == (200, {})


# ------------------------------------------------------------------------- a Feishu session

FEISHU_URL = "/hooks/claude-code?session=feishu-cli_host-private-ou_alice&bot=cli_host"


@pytest.fixture
def feishu(agent_and_key, settings):
    """A Feishu private chat whose bot is never called (its cards are only stored); the Feishu
    surface itself decides where the asks go."""
    from tests.conftest import grant_bot

    settings.ASKCARDS_SURFACES = ["askcards.surfaces.feishu.surface.FeishuSurface"]
    agent, key = agent_and_key
    from tests.feishu.integration import ENCRYPT_KEY, VERIFICATION_TOKEN

    bot = services.bot_add(platform="feishu", app_id="cli_host", app_secret="secret", base_url="http://127.0.0.1:9",
                           encrypt_key=ENCRYPT_KEY, verification_token=VERIFICATION_TOKEN)
    grant_bot(agent, bot)
    return key


def _card(key="feishu-cli_host-private-ou_alice"):
    from askcards.models import ProgressCard

    return ProgressCard.objects.filter(session__key=key).order_by("-id").first()


async def test_on_feishu_the_tool_events_keep_the_progress_card_and_prompts_stack_on_it(feishu):
    key = feishu
    pre = {**BASH, "hook_event_name": "PreToolUse", "tool_input": {"command": "npm test"}}
    response = await _post(FEISHU_URL, key, pre).get_response(timeout=10)
    assert (response["status"], json.loads(response["body"])) == (200, {})
    card = await database_sync_to_async(_card)()
    assert (card.status, card.title, card.content) == ("running", "Claude Code · shop", "执行中：Bash · npm test")

    # Two prompts of the same Claude Code session at once: both on that card, neither replaces the other.
    first = asyncio.ensure_future(_post(FEISHU_URL, key, BASH).get_response(timeout=20))
    second = asyncio.ensure_future(_post(FEISHU_URL, key, {**BASH, "tool_input": {"command": "make"}}).get_response(timeout=20))
    for _ in range(100):
        asks = await database_sync_to_async(lambda: list(Ask.objects.filter(status="pending").order_by("created_at")))()
        if len(asks) == 2:
            break
        await asyncio.sleep(0.05)
    assert [a.surfaces for a in asks] == [["feishu"], ["feishu"]]
    for ask in asks:
        await _answer(ask, [["允许"]])
    assert [json.loads((await r)["body"])["hookSpecificOutput"]["decision"]["behavior"] for r in (first, second)] == [
        "allow", "allow"]

    post = {**pre, "hook_event_name": "PostToolUse", "tool_response": {"stdout": "ok"}}
    await _post(FEISHU_URL, key, post).get_response(timeout=10)
    assert (await database_sync_to_async(_card)()).content == "已完成：Bash · npm test"
    await _post(FEISHU_URL, key, {**BASH, "hook_event_name": "Stop"}).get_response(timeout=10)
    card = await database_sync_to_async(_card)()
    assert (card.status, card.content) == ("completed", "本轮已完成")


async def test_on_feishu_a_prompt_with_no_card_running_starts_one(feishu):
    hook = asyncio.ensure_future(_post(FEISHU_URL, feishu, BASH).get_response(timeout=20))
    ask = await _open_ask()
    card = await database_sync_to_async(_card)()
    assert (card.status, card.title) == ("running", "Claude Code · shop")
    assert ask.surfaces == ["feishu"]
    await _answer(ask, [["拒绝"]])
    assert json.loads((await hook)["body"])["hookSpecificOutput"]["decision"]["behavior"] == "deny"


async def test_on_feishu_one_claude_code_session_stopping_leaves_anothers_prompt_waiting(feishu):
    """Two Claude Code sessions share one session URL (one Feishu chat): session A's turn ends
    (Stop) while session B's prompt waits on the card. A's own leftover prompt is withdrawn; B's
    stays answerable on the running card, and B's decision still reaches B; B's Stop then ends
    the run."""
    key = feishu
    session_a, session_b = {**BASH, "session_id": "aaaa-claude"}, {**BASH, "session_id": "bbbb-claude"}
    left_in_a = asyncio.ensure_future(_post(FEISHU_URL, key, session_a).get_response(timeout=20))
    ask_a = await _open_ask()
    waiting_in_b = asyncio.ensure_future(
        _post(FEISHU_URL, key, {**session_b, "tool_input": {"command": "make"}}).get_response(timeout=20))
    for _ in range(100):
        pending = await database_sync_to_async(lambda: list(Ask.objects.filter(status="pending").order_by("created_at")))()
        if len(pending) == 2:
            break
        await asyncio.sleep(0.05)
    ask_b = pending[1]

    stop = await _post(FEISHU_URL, key, {**session_a, "hook_event_name": "Stop"}).get_response(timeout=10)
    assert (stop["status"], json.loads(stop["body"])) == (200, {})
    ask_a = await database_sync_to_async(Ask.objects.get)(pk=ask_a.id)
    assert (ask_a.status, ask_a.reason) == ("cancelled", "host_handled")
    assert json.loads((await left_in_a)["body"]) == {}
    assert (await database_sync_to_async(Ask.objects.get)(pk=ask_b.id)).status == "pending"
    card = await database_sync_to_async(_card)()
    assert card.status == "running"

    await _answer(ask_b, [["允许"]])
    decision = json.loads((await waiting_in_b)["body"])["hookSpecificOutput"]["decision"]
    assert decision == {"behavior": "allow", "updatedInput": {"command": "make"}}
    await _post(FEISHU_URL, key, {**session_b, "hook_event_name": "Stop"}).get_response(timeout=10)
    card = await database_sync_to_async(_card)()
    assert (card.status, card.content) == ("completed", "本轮已完成")


async def test_on_feishu_a_stop_leaves_an_agents_own_ask_on_the_card(feishu, agent_and_key):
    """An agent's own ask (its MCP call) on the session a Claude Code session reports to: the
    Claude Code session's Stop does not end the run under it."""
    agent, key = agent_and_key
    await _post(FEISHU_URL, key, {**BASH, "hook_event_name": "PreToolUse"}).get_response(timeout=10)
    from askcards.models import Session
    from tests.conftest import QUESTIONS

    session = await database_sync_to_async(Session.objects.get)(key="feishu-cli_host-private-ou_alice")

    outcome = await database_sync_to_async(services.tool_call)(
        agent=agent, session=session, name="ask_user_questions", arguments={"questions": QUESTIONS})
    assert outcome.status == "pending"
    await _post(FEISHU_URL, key, {**BASH, "hook_event_name": "Stop"}).get_response(timeout=10)
    assert (await database_sync_to_async(Ask.objects.get)(pk=outcome.ask.id)).status == "pending"
    assert (await database_sync_to_async(_card)()).status == "running"


async def test_on_feishu_a_late_click_on_a_withdrawn_prompt_is_told_it_expired_and_changes_nothing(feishu):
    """The host stopped waiting (the ask withdrawn, host_gone); alice then submits the form still
    on her copy of the card, in a signed callback as Feishu sends it: the usual 问题已失效 toast,
    and the ask stays as it was — no answer recorded, nothing reaches anyone."""
    from askcards.surfaces.feishu import cards
    from tests.feishu.integration import click, submit_value

    ask = await _given_up(FEISHU_URL, feishu, BASH)
    assert ask.surfaces == ["feishu"]

    bot = await database_sync_to_async(lambda: ask.session.bot)()
    late = await database_sync_to_async(click)(bot, operator="ou_alice", value=submit_value(ask),
                                                form_value={"q0_0": "0", "c0_0": ""})

    assert late.status_code == 200
    assert late.json()["toast"] == {"type": "info", "content": cards.TOAST_STALE}
    after = await database_sync_to_async(Ask.objects.get)(pk=ask.id)
    assert (after.status, after.reason, after.result, after.closed_at) == (
        "cancelled", "host_gone", ask.result, ask.closed_at)
    kinds = await database_sync_to_async(lambda: list(AskEvent.objects.filter(ask_id=ask.id).values_list(
        "kind", flat=True)))()
    assert "responded" not in kinds and "delivered" not in kinds


@pytest.mark.parametrize("captured, shown", [
    ("permission_request_webfetch", "访问网址：https://example.com/page\nSummarize the page"),
    ("permission_request_mcp_tool", '调用 MCP 工具：askcards_test / echo\n参数：{\n "text": "hello"\n}'),
])
async def test_on_a_feishu_card_a_prompt_says_what_the_tool_does_and_which_session_asks(feishu, captured, shown):
    """The pinned Claude Code's own events: a fetch shows its URL and prompt, an MCP tool its
    server, name and arguments; the head names the host, its folder and its session id — all of
    it on the card a person reads (markdown shown literally)."""
    from askcards.surfaces.feishu import cards as feishu_cards
    from askcards.surfaces.feishu import surface as feishu_surface

    event = json.loads((EVENTS / f"{captured}.json").read_text())
    hook = asyncio.ensure_future(_post(FEISHU_URL, feishu, event).get_response(timeout=20))
    ask = await _open_ask()
    head = f"Claude Code · 目录 {event['cwd']} · 会话 {event['session_id']}"
    assert ask.questions[0]["question"] == f"{head}\n{shown}"
    card = await database_sync_to_async(lambda: feishu_surface.render(_card()).card)()
    on_card = json.dumps(card, ensure_ascii=False)
    for line in (head, *shown.splitlines()):
        assert json.dumps(feishu_cards.escape_md(line), ensure_ascii=False)[1:-1] in on_card, line
    await _answer(ask, [["拒绝"]])
    assert json.loads((await hook)["body"])["hookSpecificOutput"]["decision"]["behavior"] == "deny"


# ---------------------------------------------------------------------------- elicitations

ELICIT = {
    "session_id": "4244802f-claude", "cwd": "/home/alice/shop", "hook_event_name": "Elicitation",
    "mcp_server_name": "deploy", "message": "Where should we deploy?", "mode": "form",
    "requested_schema": {"type": "object", "required": ["target"], "properties": {
        "target": {"type": "string", "title": "Target", "oneOf": [{"const": "stg", "title": "Staging"},
                                                               {"const": "prod", "title": "Production"}]},
        "replicas": {"type": "integer", "title": "Replicas", "minimum": 1, "maximum": 9, "default": 2},
        "notify": {"type": "boolean", "title": "Notify"},
    }},
}


async def _elicited(key, labels, customs):
    hook = asyncio.ensure_future(_post(SESSION_URL, key, ELICIT).get_response(timeout=20))
    ask = await _open_ask()
    answers = [{"question": q["question"], "selectedLabels": labels[i], "customInput": customs[i]}
               for i, q in enumerate(ask.questions)]
    outcome = await database_sync_to_async(services.ask_answer)(ask_id=ask.id, answers=answers, surface="web")
    assert outcome.accepted, (outcome.reason, outcome.detail)
    response = await hook
    return ask, json.loads(response["body"])


async def test_an_elicitation_is_a_form_and_its_answer_the_content(present):
    _, key = present
    ask, reply = await _elicited(present[1], [["Production"], [], ["是"], ["提交"]], [None, "3", None, None])

    assert [q["header"] for q in ask.questions] == ["Target", "Replicas", "Notify", "回应"]
    assert "Where should we deploy?" in ask.questions[0]["question"]
    assert [o["label"] for o in ask.questions[0]["options"]] == ["Staging", "Production"]
    assert "≥ 1 ≤ 9" in ask.questions[1]["question"]
    assert reply == {"hookSpecificOutput": {"hookEventName": "Elicitation", "action": "accept",
                                            "content": {"target": "prod", "replicas": 3, "notify": True}}}


async def test_an_elicitation_declined_or_left_at_its_default(present):
    _, key = present
    _, declined = await _elicited(key, [["Staging"], ["留空"], ["否"], ["拒绝提供"]], [None] * 4)
    assert declined == {"hookSpecificOutput": {"hookEventName": "Elicitation", "action": "decline"}}
    # Left empty, the default is sent.
    _, defaulted = await _elicited(key, [["Staging"], ["留空"], ["否"], ["提交"]], [None] * 4)
    assert defaulted["hookSpecificOutput"]["content"] == {"target": "stg", "replicas": 2, "notify": False}


async def test_an_elicitation_too_big_for_the_panels_form_is_left_to_the_host(present):
    """More properties (or choices) than the panel's form holds: no decision — Claude Code asks
    in its own dialog — and nothing is asked here (a DingTalk form holds more:
    tests/hosts/test_elicitation.py)."""
    _, key = present
    many = {f"f{n}": {"type": "string"} for n in range(5)}
    five = {"pick": {"type": "string", "enum": ["a", "b", "c", "d", "e"]}}
    for properties in (many, five):
        event = {**ELICIT, "requested_schema": {"type": "object", "properties": properties}}
        response = await _post(SESSION_URL, key, event).get_response(timeout=10)
        assert (response["status"], json.loads(response["body"])) == (200, {})
    assert await database_sync_to_async(Ask.objects.count)() == 0


async def test_a_prompt_answered_in_the_terminal_leaves_the_panel_once_its_tool_ran(present):
    """Answered "Yes" in the terminal, Claude Code keeps the hook's request open until its timeout;
    the tool's PostToolUse event says it ran, and the ask is withdrawn at once (PreToolUse comes
    before the permission check: it settles nothing)."""
    _, key = present
    hook = asyncio.ensure_future(_post(SESSION_URL, key, BASH).get_response(timeout=20))
    ask = await _open_ask()
    for unsettling in ({**BASH, "hook_event_name": "PostToolUse", "tool_input": {"command": "ls"}},  # another tool
                       {**BASH, "hook_event_name": "PreToolUse", "tool_use_id": "toolu_01"}):
        await _post(SESSION_URL, key, unsettling).get_response(timeout=10)
        assert (await database_sync_to_async(Ask.objects.get)(pk=ask.id)).status == "pending"

    post = {**BASH, "hook_event_name": "PostToolUse", "tool_use_id": "toolu_01", "tool_response": {"stdout": ""}}
    response = await _post(SESSION_URL, key, post).get_response(timeout=10)
    assert (response["status"], json.loads(response["body"])) == (200, {})
    ask = await database_sync_to_async(Ask.objects.get)(pk=ask.id)
    assert (ask.status, ask.reason) == ("cancelled", "host_handled")
    assert json.loads((await hook)["body"]) == {}


async def test_a_prompt_answered_in_the_terminal_whose_tool_then_failed_leaves_the_panel(present):
    """Allowed in the terminal, the tool ran and failed: Claude Code fires PostToolUseFailure, not
    PostToolUse (tests/hosts/test_claude_code_facts.py), and that settles the prompt just the same."""
    _, key = present
    fetch = json.loads((EVENTS / "permission_request_webfetch.json").read_text())
    hook = asyncio.ensure_future(_post(SESSION_URL, key, fetch).get_response(timeout=20))
    ask = await _open_ask()
    assert "访问网址：https://example.com/page" in ask.questions[0]["question"]
    failed = json.loads((EVENTS / "post_tool_use_failure_webfetch.json").read_text())
    response = await _post(SESSION_URL, key, failed).get_response(timeout=10)
    assert (response["status"], json.loads(response["body"])) == (200, {})
    ask = await database_sync_to_async(Ask.objects.get)(pk=ask.id)
    assert (ask.status, ask.reason) == ("cancelled", "host_handled")
    assert json.loads((await hook)["body"]) == {}


async def test_a_prompt_denied_in_the_terminal_leaves_the_panel_when_the_turn_ends(present):
    """Denied in the terminal, no tool runs (no PostToolUse); Claude Code keeps the hook's request
    open. The turn's Stop says the prompt was settled there: withdrawn on a web session too, while
    another Claude Code session's prompt on the same session URL stays answerable."""
    _, key = present
    mine, theirs = {**BASH, "session_id": "aaaa-claude"}, {**BASH, "session_id": "bbbb-claude",
                                                           "tool_input": {"command": "make"}}
    hook = asyncio.ensure_future(_post(SESSION_URL, key, mine).get_response(timeout=20))
    ask = await _open_ask()
    other = asyncio.ensure_future(_post(SESSION_URL, key, theirs).get_response(timeout=20))
    for _ in range(100):
        pending = await database_sync_to_async(lambda: list(Ask.objects.filter(status="pending").order_by("created_at")))()
        if len(pending) == 2:
            break
        await asyncio.sleep(0.05)
    assert len(pending) == 2

    stop = await _post(SESSION_URL, key, {**mine, "hook_event_name": "Stop"}).get_response(timeout=10)
    assert (stop["status"], json.loads(stop["body"])) == (200, {})
    ask = await database_sync_to_async(Ask.objects.get)(pk=ask.id)
    assert (ask.status, ask.reason) == ("cancelled", "host_handled")
    assert json.loads((await hook)["body"]) == {}
    assert (await database_sync_to_async(Ask.objects.get)(pk=pending[1].id)).status == "pending"
    other.cancel()


# ------------------------------------------------------------------------- a DingTalk session

DINGTALK_URL = "/hooks/claude-code?session=dingtalk/dm/staff_a&platform=dingtalk&chat_type=p2p&user_id=staff_a"


async def _dingtalk_decided(key, event, form, *, among=0):
    """Post ``event``, then answer its ask (the ``among``-th pending one: earlier ones wait too)."""
    hook = asyncio.ensure_future(_post(DINGTALK_URL, key, event).get_response(timeout=20))
    for _ in range(100):
        asks = await database_sync_to_async(lambda: list(Ask.objects.filter(status="pending").order_by("created_at")))()
        if len(asks) > among:
            break
        await asyncio.sleep(0.05)
    ask = asks[among]
    click = await database_sync_to_async(services.dingtalk_click)(ask=ask, user_id="staff_a", action="submit", form=form)
    assert click.kind != "rejected", click
    response = await hook
    assert response["status"] == 200, response["body"]
    return ask, json.loads(response["body"])


async def test_on_dingtalk_a_prompt_is_a_form_and_parallel_prompts_replace_nothing(present):
    _, key = present
    first = asyncio.ensure_future(_post(DINGTALK_URL, key, BASH).get_response(timeout=20))
    await _open_ask()  # the first prompt is asked
    ask, denied = await _dingtalk_decided(key, {**BASH, "tool_input": {"command": "make"}},
                                          {"q0": "o1", "q0_other": "先跑测试"}, among=1)
    assert ask.tool == "dingtalk_ask_user_question"
    assert [f["label"] for f in ask.fields] == ["权限请求", "权限请求 · 其他（可选）"]
    assert "make" in ask.description
    decision = denied["hookSpecificOutput"]["decision"]
    assert decision["behavior"] == "deny" and decision["message"].endswith("先跑测试")
    # The first prompt is still open (a second prompt replaced nothing) and is answered after.
    [waiting] = await database_sync_to_async(lambda: list(Ask.objects.filter(status="pending")))()
    await database_sync_to_async(services.dingtalk_click)(ask=waiting, user_id="staff_a", action="submit",
                                                          form={"q0": "o0"})
    allowed = json.loads((await first)["body"])["hookSpecificOutput"]["decision"]
    assert allowed == {"behavior": "allow", "updatedInput": BASH["tool_input"]}


async def test_on_dingtalk_someone_else_cannot_answer_a_host_prompt(present):
    """staff_b submits the card of staff_a's prompt: refused with the card's words, the prompt
    stays open, and only staff_a's answer decides."""
    from askcards.surfaces.dingtalk import cards as dingtalk_cards

    _, key = present
    hook = asyncio.ensure_future(_post(DINGTALK_URL, key, BASH).get_response(timeout=20))
    ask = await _open_ask()
    click = await database_sync_to_async(services.dingtalk_click)(ask=ask, user_id="staff_b", action="submit",
                                                                  form={"q0": "o0"})
    assert (click.kind, click.reason) == (services.ClickKind.REJECTED, services.ClickRefusal.NOT_OWNER)
    assert dingtalk_cards.notice(click.reason) == "仅提问对象可以回答这张卡片。"
    assert (await database_sync_to_async(Ask.objects.get)(pk=ask.id)).status == "pending"
    click = await database_sync_to_async(services.dingtalk_click)(ask=ask, user_id="staff_a", action="submit",
                                                                  form={"q0": "o1"})
    assert json.loads((await hook)["body"])["hookSpecificOutput"]["decision"]["behavior"] == "deny"


async def test_on_dingtalk_ask_user_question_reads_back_by_question(present):
    _, key = present
    event = {**BASH, "tool_name": "AskUserQuestion", "tool_input": {"questions": QUESTIONS}}
    _, reply = await _dingtalk_decided(key, event, {"q0": "o0", "q1": ["o0", "o2"], "q1_other": "and WeCom"})
    assert reply["hookSpecificOutput"]["decision"]["updatedInput"]["answers"] == {
        "Which database should we use?": "PostgreSQL", "Which platforms?": "Feishu, Web, and WeCom"}
