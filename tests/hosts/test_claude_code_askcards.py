"""The real Claude Code CLI (pinned in tests/hosts/package-lock.json), offline against the tests' fake
Messages API, with its hooks pointed at a real askcards ``serve`` by docs/agents/hosts.md's own settings
block (only the address, the session and the timeout changed): its prompts are answered on a (fake) Feishu card and on alice's web panel, and what the person
answered is what Claude Code does."""
from __future__ import annotations

import json
import threading
import time

import pytest

from tests import serving
from tests.fakes.feishu import FakeFeishu
from tests.feishu.helpers import forms
from tests.feishu.integration import ENCRYPT_KEY, VERIFICATION_TOKEN, signed_callback
from tests.hosts import claude
from tests.hosts.claude import Host
from tests.hosts.test_docs_claude_code_settings import documented_settings
from tests.hosts.fake_anthropic import FakeAnthropic, Text, ToolUse
from tests.hosts.people import WEB_SESSION, askcards

WRITE_HI = ToolUse("Bash", {"command": "echo hi > out.txt", "description": "Write hi to out.txt"})
WAIT = 60  # every wait below is bounded


@pytest.fixture(autouse=True)
def claude_installed():
    claude.binary()


def _settings(base: str, query: str, *, timeout: int = 120, events=("PermissionRequest",)) -> dict:
    """The hosts page's settings JSON, read out of docs/agents/hosts.md as written (http hooks, the
    agent key from the environment), pointed at this server and session with the prompts'
    ``timeout``; ``events`` keeps those of its hooks (None: all of them, the page's whole block)."""
    return documented_settings(base, query, timeout=timeout, events=events)


def _in_background(fn):
    done: dict = {}
    thread = threading.Thread(target=lambda: done.update(run=fn()), daemon=True)
    thread.start()
    return thread, done


# ------------------------------------------------------------------------------------ the panel

def test_denied_on_the_panel_the_command_does_not_run_and_the_model_reads_why(tmp_path):
    with askcards(tmp_path / "askcards") as (base, key, alice), \
            FakeAnthropic([WRITE_HI, Text("Understood.")]) as api:
        alice.answers([["拒绝"]], custom="先别写文件，等我看一下")
        host = Host(tmp_path, api, settings=_settings(base, WEB_SESSION), env={"ASKCARDS_KEY": key})
        run = host.run_print("Write hi to out.txt")
        [shown] = alice.shown

    assert run.returncode == 0, run.stderr
    assert "echo hi > out.txt" in shown["questions"][0]["question"]
    assert not (host.project / "out.txt").exists()
    result = api.tool_results()["toolu_fake_0_0"]
    assert result["is_error"] is True and "先别写文件，等我看一下" in json.dumps(result["content"], ensure_ascii=False)


def test_headless_permission_prompt_tool_answered_on_the_panel(tmp_path):
    with askcards(tmp_path / "askcards") as (base, key, alice), \
            FakeAnthropic([WRITE_HI, Text("Wrote it.")]) as api:
        alice.answers([["允许"]])
        host = Host(tmp_path, api, settings={}, env={"ASKCARDS_KEY": key})
        config = {"mcpServers": {"askcards": {
            "type": "http", "url": f"{base}/mcp?{WEB_SESSION}&permission_prompt=1",
            "headers": {"Authorization": f"Bearer {key}"}}}}
        run = host.run_print("Write hi to out.txt", args=[
            *host.mcp_config(config), "--permission-prompt-tool", "mcp__askcards__permission_prompt"])
        [shown] = alice.shown

    assert run.returncode == 0, run.stderr
    assert "echo hi > out.txt" in shown["questions"][0]["question"]
    assert (host.project / "out.txt").read_text() == "hi\n"


def test_the_host_giving_up_withdraws_the_ask_from_the_panel(tmp_path):
    """Claude Code's own hook timeout passes while nobody answers: its request closes, and the
    ask leaves alice's panel with the reason she reads."""
    with askcards(tmp_path / "askcards") as (base, key, alice), \
            FakeAnthropic([WRITE_HI, Text("No answer.")]) as api:
        alice.holds()
        # The URL claims a longer timeout than the hook really has: Claude Code gives up first.
        settings = _settings(base, WEB_SESSION, timeout=600)
        settings["hooks"]["PermissionRequest"][0]["hooks"][0]["timeout"] = 8
        host = Host(tmp_path, api, settings=settings, env={"ASKCARDS_KEY": key})
        run = host.run_print("Write hi to out.txt")
        [shown] = alice.shown
        reason = alice.wait_ended(shown["requestId"])

    assert run.returncode == 0, run.stderr
    assert not (host.project / "out.txt").exists()
    assert reason == "host_gone"


# ------------------------------------------------------------------------------------- Feishu

@pytest.fixture
def feishu_served(tmp_path):
    with FakeFeishu() as fake:
        env = serving.service_env(tmp_path / "askcards")
        serving.manage(env, "migrate", "-v0")
        key = json.loads(serving.manage(env, "askcards_agent", "create", "coder", "--json"))["key"]
        serving.manage(env, "askcards_bot", "add", "feishu", "--app-id", fake.app_id, "--app-secret", fake.app_secret,
                       "--verification-token", VERIFICATION_TOKEN, "--encrypt-key", ENCRYPT_KEY,
                       "--base-url", fake.base_url)
        serving.manage(env, "askcards_agent", "grant", "coder", "--bot", fake.app_id)
        with serving.serve(env) as base:
            yield base, key, fake


def test_approved_on_a_feishu_card_the_command_runs_and_the_card_shows_progress(tmp_path, feishu_served):
    base, key, fake = feishu_served
    query = f"session=feishu-{fake.app_id}-private-ou_alice&bot={fake.app_id}"
    with FakeAnthropic([WRITE_HI, Text("Wrote it.")]) as api:
        settings = _settings(base, query, events=None)  # the page's whole block, the progress hooks too
        host = Host(tmp_path, api, settings=settings, env={"ASKCARDS_KEY": key})
        thread, done = _in_background(lambda: host.run_print("Write hi to out.txt"))

        message = serving.until(lambda: next(iter(fake.messages.values()), None), "the progress card", WAIT)
        card = serving.until(lambda: forms(message.card) and message.card, "the approval on the card", WAIT)
        assert "echo hi > out.txt" in json.dumps(card, ensure_ascii=False)
        submit = next(e for e in forms(card)[0]["elements"] if e["tag"] == "button")
        body, headers = signed_callback(fake.app_id, operator="ou_alice", value=submit["behaviors"][0]["value"],
                                        message_id=message.message_id, form_value={"q0_0": "0", "c0_0": ""})
        import requests

        response = requests.post(f"{base}/callbacks/feishu/{fake.app_id}/", data=body,
                                 headers={**headers, "Content-Type": "application/json"}, timeout=5)
        assert response.status_code == 200 and response.json()["toast"]["content"] == "已提交"
        thread.join(timeout=WAIT)
        assert not thread.is_alive()

    run = done["run"]
    assert run.returncode == 0, run.stderr
    assert (host.project / "out.txt").read_text() == "hi\n"
    # PostToolUse, then Stop: the card says the turn is done.
    serving.until(lambda: "本轮已完成" in json.dumps(message.card, ensure_ascii=False), "the card to show the turn ended", WAIT)


def test_the_host_giving_up_withdraws_the_form_from_the_feishu_card_saying_why(tmp_path, feishu_served):
    """Nobody answers on the card before Claude Code's own hook timeout: its request closes, and
    the card askcards PATCHes (the fake Feishu server holds every version) drops the form and
    says why, in the panel's words."""
    base, key, fake = feishu_served
    query = f"session=feishu-{fake.app_id}-private-ou_alice&bot={fake.app_id}"
    with FakeAnthropic([WRITE_HI, Text("No answer.")]) as api:
        settings = _settings(base, query, timeout=600)
        settings["hooks"]["PermissionRequest"][0]["hooks"][0]["timeout"] = 8  # Claude Code gives up first
        host = Host(tmp_path, api, settings=settings, env={"ASKCARDS_KEY": key})
        thread, done = _in_background(lambda: host.run_print("Write hi to out.txt"))

        message = serving.until(lambda: next(iter(fake.messages.values()), None), "the progress card", WAIT)
        asked = serving.until(lambda: forms(message.card) and message.card, "the approval on the card", WAIT)
        assert "echo hi &#62; out.txt" in json.dumps(asked, ensure_ascii=False)  # shown literally (escaped)
        thread.join(timeout=WAIT)
        assert not thread.is_alive()
        withdrawn = serving.until(
            lambda: "智能体已停止等待。" in json.dumps(message.card, ensure_ascii=False) and message.card,
            "the card to say why the form left", WAIT)

    assert done["run"].returncode == 0, done["run"].stderr
    assert not (host.project / "out.txt").exists()
    assert not forms(withdrawn)
    assert "- 权限请求：智能体已停止等待。" in json.dumps(withdrawn, ensure_ascii=False)
    assert fake.calls("PATCH", f"/open-apis/im/v1/messages/{message.message_id}")


# ------------------------------------------------------------------ AskUserQuestion, interactive

QUESTION = "Which database should we use?"
ASK_DATABASE = ToolUse("AskUserQuestion", {"questions": [{
    "question": QUESTION, "header": "Database", "multiSelect": False,
    "options": [{"label": "PostgreSQL", "description": "Relational"}, {"label": "SQLite", "description": "Embedded"}],
}]})


def test_ask_user_question_answered_on_the_panel_reads_as_typed_in_the_terminal(tmp_path):
    """The interactive CLI (tmux) offers AskUserQuestion; alice answers it on her panel."""
    with askcards(tmp_path / "askcards") as (base, key, alice), \
            FakeAnthropic([ASK_DATABASE, Text("PostgreSQL it is.")]) as api:
        alice.answers([["PostgreSQL"]])
        host = Host(tmp_path, api, settings=_settings(base, WEB_SESSION), env={"ASKCARDS_KEY": key})
        with host.interactive() as term:
            term.wait_ready()
            term.submit("Ask me which database to use")
            screen = term.wait_for("PostgreSQL it is.", WAIT)
        [shown] = alice.shown

    assert shown["questions"][0]["header"] == "Database"
    assert "Answered Claude's questions" in screen
    assert f'"{QUESTION}"="PostgreSQL"' in api.tool_result_text("toolu_fake_0_0")


def test_answered_in_the_terminal_first_the_ask_leaves_the_panel_when_the_tool_runs(tmp_path):
    with askcards(tmp_path / "askcards") as (base, key, alice), \
            FakeAnthropic([WRITE_HI, Text("Wrote it.")]) as api:
        alice.holds()
        settings = _settings(base, WEB_SESSION, timeout=300, events=("PermissionRequest", "PostToolUse"))
        host = Host(tmp_path, api, settings=settings, env={"ASKCARDS_KEY": key})
        with host.interactive() as term:
            term.wait_ready()
            term.submit("Write hi to out.txt")
            term.wait_for("Do you want to proceed?", WAIT)
            serving.until(lambda: alice.shown, "the prompt on the panel", WAIT)
            started = time.monotonic()
            term.answer("Enter", "Do you want to proceed?")  # 1. Yes, in the terminal
            term.wait_for("Wrote it.", WAIT)
            reason = alice.wait_ended(alice.shown[0]["requestId"], seconds=20)
            took = time.monotonic() - started

    assert (host.project / "out.txt").read_text() == "hi\n"
    assert reason == "host_handled" and took < 20  # not the hook's 300 s


# ------------------------------------------------------------------------------- elicitation

def test_an_mcp_servers_elicitation_is_answered_on_the_panel_and_the_server_gets_the_content(tmp_path):
    """A small MCP server (the official Python SDK) asks for input while Claude Code calls it;
    the Elicitation hook puts the form on alice's panel, and her answer is what the server gets."""
    from tests.hosts.mcp_server import McpServer

    with askcards(tmp_path / "askcards") as (base, key, alice), McpServer() as mcp, \
            FakeAnthropic([ToolUse(f"mcp__{mcp.name}__pick_database", {}), Text("Done.")]) as api:
        alice.answers([["允许"]])  # the permission to call the MCP tool
        alice.answers([["PostgreSQL"], ["留空"], ["提交"]])
        settings = _settings(base, WEB_SESSION, events=("PermissionRequest", "Elicitation"))
        host = Host(tmp_path, api, settings=settings, env={"ASKCARDS_KEY": key})
        run = host.run_print("Pick a database", args=host.mcp_config(mcp.config()))
        permission, form = alice.shown

    assert run.returncode == 0, run.stderr
    assert f"mcp__{mcp.name}__pick_database".split("__")[-1] in permission["questions"][0]["question"]
    assert [q["header"] for q in form["questions"]] == ["Database", "Reason", "回应"]
    assert mcp.elicit_results == [{"action": "accept", "data": {"database": "PostgreSQL", "reason": ""}}]


# ------------------------------------------------------------------------------------- DingTalk

DINGTALK_SEED = """
import json
from askcards import services
bot = services.bot_add(platform="dingtalk", app_id={app_id!r}, app_secret={secret!r}, base_url={base_url!r},
                       api_secret="callback-api-secret", callback_mode="http")
agent, key = services.agent_create(name="coder", bots=[bot])
print(json.dumps({{"key": key}}))
"""


def _dingtalk_submit(base, fake, card, form):
    """staff_a submits the card. The card reaches DingTalk while its ask is being activated: a click
    in that instant is told 问题已失效 and recorded nowhere, so (as a person would) it is sent again,
    a few times at most."""
    from tests.fakes.dingtalk import signed_callback

    import requests

    for _ in range(20):
        headers, body = signed_callback("callback-api-secret", out_track_id=card.out_track_id, user_id="staff_a",
                                        question_id=card.params["question_id"], form=form)
        response = requests.post(f"{base}/callbacks/dingtalk/{fake.client_id}/", data=body, headers=headers, timeout=5)
        assert response.status_code == 200, response.text
        notice = response.json().get("userPrivateData", {}).get("cardParamMap", {}).get("user_notice", "")
        if "问题已失效" not in notice:
            return
        time.sleep(0.25)
    raise AssertionError(f"the card kept refusing the submit: {notice}")


def test_an_elicitation_answered_on_a_dingtalk_card_reaches_the_mcp_server(tmp_path):
    """The MCP tool's permission, then the server's elicitation, each a DingTalk card answered by
    staff_a (signed HTTP callbacks, as DingTalk sends them)."""
    from tests.fakes.dingtalk import FakeDingTalk
    from tests.hosts.mcp_server import McpServer

    with FakeDingTalk() as fake:
        seed_code = DINGTALK_SEED.format(app_id=fake.client_id, secret=fake.client_secret, base_url=fake.base_url)
        env = serving.service_env(tmp_path / "askcards")
        serving.manage(env, "migrate", "-v0")
        seed = serving.shell_json(env, seed_code)
        with serving.serve(env) as base, McpServer() as mcp, \
                FakeAnthropic([ToolUse(f"mcp__{mcp.name}__pick_database", {}), Text("Done.")]) as api:
            # DingTalk calls the cards back at the route askcards registers for the bot.
            serving.manage(env, "askcards_dingtalk_register", "--client-id", fake.client_id,
                           "--url", f"{base}/callbacks/dingtalk/{fake.client_id}/")
            query = f"session=dingtalk%2Fdm%2Fstaff_a&platform=dingtalk&chat_type=p2p&user_id=staff_a&bot={fake.client_id}"
            settings = _settings(base, query, events=("PermissionRequest", "Elicitation"))
            host = Host(tmp_path, api, settings=settings, env={"ASKCARDS_KEY": seed["key"]})
            thread, done = _in_background(lambda: host.run_print("Pick a database", args=host.mcp_config(mcp.config())))

            permission = serving.until(lambda: next(iter(fake.cards.values()), None), "the permission card", WAIT)
            assert "pick_database" in json.dumps(permission.create_body, ensure_ascii=False)
            _dingtalk_submit(base, fake, permission, {"q0": "o0"})  # 允许
            form = serving.until(lambda: next((c for c in fake.cards.values() if c is not permission), None),
                                 "the elicitation card", WAIT)
            # Database: PostgreSQL; Reason: written in 其他; 回应: 提交.
            _dingtalk_submit(base, fake, form, {"q0": "o0", "q1": "o0", "q1_other": "关系型", "q2": "o0"})
            thread.join(timeout=WAIT)
            assert not thread.is_alive()

    assert done["run"].returncode == 0, done["run"].stderr
    assert mcp.elicit_results == [{"action": "accept", "data": {"database": "PostgreSQL", "reason": "关系型"}}]
