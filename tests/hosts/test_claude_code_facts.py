"""What the pinned Claude Code CLI does with http hooks, a permission-prompt MCP tool and MCP
elicitation, found by experiment (/work/notes is not shipped; these tests are the record). Each
runs the real binary against the fake API; a version bump that changes one of these shows here."""
from __future__ import annotations

import time

import pytest

from tests.hosts import claude
from tests.hosts.claude import Host, http_hook, http_hooks
from tests.hosts.fake_anthropic import FakeAnthropic, Text, ToolUse
from tests.hosts.hook_server import Hold, HookServer, Reply, permission_decision
from tests.hosts.mcp_server import McpServer

WRITE_HI = ToolUse("Bash", {"command": "echo hi > out.txt", "description": "Write hi to out.txt"})
APPEND = "python3 -c \"open('a.txt','a').write('x')\""
QUESTION = "Which database should we use?"
QUESTIONS = {"questions": [{
    "question": QUESTION, "header": "Database", "multiSelect": False,
    "options": [{"label": "PostgreSQL", "description": "Relational"}, {"label": "SQLite", "description": "Embedded"}],
}]}


def hooks_for(server: HookServer, *events: str, **options) -> dict:
    return http_hooks({event: http_hook(server.url(), **options) for event in events})


def test_the_hook_timeout_is_in_seconds_and_closes_the_request_then_no_decision(tmp_path):
    claude.binary()
    with HookServer(lambda call: Hold(max_seconds=30, release_reply=permission_decision("allow"))) as hooks, \
            FakeAnthropic([WRITE_HI, Text("Done.")]) as api:
        host = Host(tmp_path, api, settings=hooks_for(hooks, "PermissionRequest", timeout=2))
        run = host.run_print("Write hi")

    [call] = hooks.calls
    assert call.closed_at is not None and 1.5 <= call.closed_at - call.received_at <= 4
    assert call.answered_at is None
    assert not (host.project / "out.txt").exists()
    assert "needs approval" in api.tool_result_text("toolu_fake_0_0")
    assert run.seconds < 20


@pytest.mark.parametrize("reply", [
    Reply(200, b""), Reply(200, {}), Reply(200, b"not json"), Reply(500, {"behavior": "allow"}),
    Reply(403, permission_decision("allow")), Reply(302, b""),
    Reply(200, {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}),
], ids=["empty-body", "empty-object", "not-json", "500", "403-with-allow", "302", "other-event"])
def test_an_answer_without_a_permission_decision_leaves_the_command_unrun(tmp_path, reply):
    claude.binary()
    with HookServer(lambda call: reply) as hooks, FakeAnthropic([WRITE_HI, Text("Done.")]) as api:
        host = Host(tmp_path, api, settings=hooks_for(hooks, "PermissionRequest"))
        run = host.run_print("Write hi")

    assert run.returncode == 0 and len(hooks.calls) == 1
    assert not (host.project / "out.txt").exists()
    assert "needs approval" in api.tool_result_text("toolu_fake_0_0")


def test_deny_with_interrupt_ends_the_run(tmp_path):
    claude.binary()
    with HookServer(lambda call: permission_decision("deny", message="stop", interrupt=True)) as hooks, \
            FakeAnthropic([WRITE_HI, Text("Never sent.")]) as api:
        host = Host(tmp_path, api, settings=hooks_for(hooks, "PermissionRequest"))
        run = host.run_print("Write hi")

    assert run.returncode == 1 and run.output()["subtype"] == "error_during_execution"
    assert len(api.main_requests()) == 1  # the model is not called again
    assert not (host.project / "out.txt").exists()


def test_allow_for_the_session_through_updated_permissions(tmp_path):
    claude.binary()

    def allow_for_session(call):
        return permission_decision("allow", updated_permissions=[
            dict(s, destination="session") for s in call.body["permission_suggestions"]])

    other = APPEND.replace("a.txt", "b.txt")
    with HookServer(allow_for_session) as hooks, \
            FakeAnthropic([ToolUse("Bash", {"command": APPEND}), ToolUse("Bash", {"command": APPEND}),
                           ToolUse("Bash", {"command": other}), Text("Done.")]) as api:
        host = Host(tmp_path, api, settings=hooks_for(hooks, "PermissionRequest"))
        host.run_print("Append twice")
        assert [c.body["tool_input"]["command"] for c in hooks.calls] == [APPEND, other]
        assert hooks.calls[0].body["permission_suggestions"] == [
            {"type": "addRules", "rules": [{"toolName": "Bash", "ruleContent": APPEND}], "behavior": "allow", "destination": "localSettings"}]
        assert (host.project / "a.txt").read_text() == "xx"
        assert not (host.project / ".claude" / "settings.local.json").exists()
        host.run_print("Append again")  # a new session asks again
        assert len(hooks.calls) == 4


def test_headers_take_only_allowed_env_vars_and_the_url_takes_none(tmp_path):
    claude.binary()
    hook = http_hook(
        "http://127.0.0.1:0/",  # replaced below
        headers={"Authorization": "Bearer $ASKCARDS_KEY", "X-Session": "${ASKCARDS_SESSION}", "X-Other": "v=$OTHER",
                 "X-Api": "v=$ANTHROPIC_API_KEY"},
        allowed_env_vars=["ASKCARDS_KEY", "ASKCARDS_SESSION", "ANTHROPIC_API_KEY"])
    with HookServer(lambda call: permission_decision("allow")) as hooks, FakeAnthropic([WRITE_HI, Text("Done.")]) as api:
        hook["url"] = hooks.url("/hooks/claude-code?session=$ASKCARDS_SESSION")
        host = Host(tmp_path, api, settings=http_hooks({"PermissionRequest": hook}),
                    env={"ASKCARDS_KEY": "k1", "ASKCARDS_SESSION": "s1", "OTHER": "o"})
        host.run_print("Write hi")

    [call] = hooks.calls
    assert call.headers["Authorization"] == "Bearer k1" and call.headers["X-Session"] == "s1"
    assert call.headers["X-Other"] == "v=" and call.headers["X-Api"] == "v="  # not allowed; a credential
    assert call.path == "/hooks/claude-code?session=$ASKCARDS_SESSION"
    assert call.headers["Content-Type"] == "application/json" and call.headers["User-Agent"].startswith("axios/")


def test_the_permission_prompt_tool_contract_in_print_mode(tmp_path):
    claude.binary()

    def decide(arguments):
        if arguments["tool_name"] == "AskUserQuestion":
            return {"behavior": "allow", "updatedInput": {**arguments["input"], "answers": {QUESTION: "SQLite"}}}
        if "deny" in arguments["input"]["command"]:
            return {"behavior": "deny", "message": "not now"}
        return {"behavior": "allow", "updatedInput": arguments["input"]}

    turns = [WRITE_HI, ToolUse("Bash", {"command": "echo deny > d.txt"}), ToolUse("AskUserQuestion", QUESTIONS), Text("Done.")]
    with McpServer(decide=decide) as mcp, FakeAnthropic(turns) as api:
        host = Host(tmp_path, api)
        run = host.run_print("Go", args=[*host.mcp_config(mcp.config()), "--permission-prompt-tool", f"mcp__{mcp.name}__approve"])

    assert run.returncode == 0, run.stderr
    assert mcp.approve_calls == [
        {"tool_name": "Bash", "input": WRITE_HI.input, "tool_use_id": "toolu_fake_0_0"},
        {"tool_name": "Bash", "input": {"command": "echo deny > d.txt"}, "tool_use_id": "toolu_fake_1_0"},
        {"tool_name": "AskUserQuestion", "input": QUESTIONS, "tool_use_id": "toolu_fake_2_0"},
    ]
    [call, *_] = mcp.tool_calls()
    assert call["name"] == "approve" and call["_meta"]["claudecode/toolUseId"] == "toolu_fake_0_0"
    assert (host.project / "out.txt").exists() and not (host.project / "d.txt").exists()
    results = api.tool_results()
    assert results["toolu_fake_1_0"]["content"] == "not now" and results["toolu_fake_1_0"]["is_error"] is True
    assert f'"{QUESTION}"="SQLite"' in api.tool_result_text("toolu_fake_2_0")  # AskUserQuestion works in -p here


def test_the_hook_and_the_prompt_tool_race_and_the_first_decision_wins(tmp_path):
    claude.binary()
    slow_allow = Reply(200, permission_decision("allow"), delay=3)
    with HookServer(lambda call: slow_allow) as hooks, \
            McpServer(decide=lambda a: {"behavior": "deny", "message": "the tool said no"}) as mcp, \
            FakeAnthropic([WRITE_HI, Text("Done.")]) as api:
        host = Host(tmp_path, api, settings=hooks_for(hooks, "PermissionRequest"))
        host.run_print("Write hi", args=[*host.mcp_config(mcp.config()), "--permission-prompt-tool", f"mcp__{mcp.name}__approve"])

    assert len(hooks.calls) == 1 and len(mcp.approve_calls) == 1
    assert not (host.project / "out.txt").exists()
    assert api.tool_result_text("toolu_fake_0_0") == "the tool said no"


@pytest.mark.parametrize("answer, received", [
    ({"action": "accept", "content": {"database": "PostgreSQL", "reason": "relational"}},
     {"action": "accept", "data": {"database": "PostgreSQL", "reason": "relational"}}),
    ({"action": "decline"}, {"action": "decline"}),
    ({"action": "cancel"}, {"action": "cancel"}),
    (None, {"action": "cancel"}),  # no decision: -p has nobody to ask
], ids=["accept", "decline", "cancel", "no-decision"])
def test_the_elicitation_hook_answers_the_mcp_server(tmp_path, answer, received):
    claude.binary()

    def respond(call):
        if call.event == "PermissionRequest":
            return permission_decision("allow")
        if call.event == "Elicitation" and answer is not None:
            return {"hookSpecificOutput": {"hookEventName": "Elicitation", **answer}}
        return {}

    with HookServer(respond) as hooks, McpServer() as mcp, \
            FakeAnthropic([ToolUse(f"mcp__{mcp.name}__pick_database", {}), Text("Done.")]) as api:
        host = Host(tmp_path, api, settings=hooks_for(hooks, "PermissionRequest", "Elicitation", "ElicitationResult"))
        host.run_print("Pick", args=host.mcp_config(mcp.config()))

    [asked] = hooks.events("Elicitation")
    assert asked.body["mcp_server_name"] == mcp.name and asked.body["message"] == QUESTION
    assert asked.body["mode"] == "form" and asked.body["requested_schema"]["required"] == ["database"]
    assert mcp.elicit_results == [received]
    assert [c.body["action"] for c in hooks.events("ElicitationResult")] == ([] if answer else ["cancel"])


def test_interactive_the_dialog_shows_while_the_hook_waits_and_the_hook_still_decides(tmp_path):
    claude.binary()
    hold = Hold(max_seconds=30, release_reply=permission_decision("allow"))
    with HookServer(lambda call: hold if call.event == "PermissionRequest" else {}) as hooks, \
            FakeAnthropic([WRITE_HI, Text("Wrote it.")]) as api:
        host = Host(tmp_path, api, settings=hooks_for(hooks, "PermissionRequest", "Notification"))
        with host.interactive() as term:
            term.wait_ready()
            term.submit("Write hi")
            term.wait_for("Do you want to proceed?", 30)
            notified = hooks.wait_for(lambda c: c.event == "Notification", 20)
            assert notified.body["notification_type"] == "permission_prompt"
            assert not (host.project / "out.txt").exists()
            hold.release.set()
            screen = term.wait_for("Wrote it.", 20)

    assert "Allowed by PermissionRequest hook" in screen
    assert (host.project / "out.txt").read_text() == "hi\n"


def test_interactive_a_local_yes_leaves_the_hook_request_open_until_its_timeout(tmp_path):
    claude.binary()
    with HookServer(lambda call: Hold(max_seconds=30, release_reply=permission_decision("deny", message="late"))) as hooks, \
            FakeAnthropic([WRITE_HI, Text("Wrote it.")]) as api:
        host = Host(tmp_path, api, settings=hooks_for(hooks, "PermissionRequest", timeout=8))
        with host.interactive() as term:
            term.wait_ready()
            term.submit("Write hi")
            term.wait_for("Do you want to proceed?", 30)
            term.answer("Enter", "Do you want to proceed?")  # 1. Yes
            term.wait_for("Wrote it.", 20)
            [call] = hooks.calls
            assert call.closed_at is None  # answered in the terminal, yet the hook's request stays open
            deadline = time.monotonic() + 15
            while call.closed_at is None and time.monotonic() < deadline:
                time.sleep(0.2)

    assert call.closed_at is not None and 7 <= call.closed_at - call.received_at <= 10
    assert (host.project / "out.txt").read_text() == "hi\n"


def test_interactive_a_local_no_closes_the_hook_request(tmp_path):
    claude.binary()
    with HookServer(lambda call: Hold(max_seconds=30)) as hooks, FakeAnthropic([WRITE_HI, Text("Wrote it.")]) as api:
        host = Host(tmp_path, api, settings=hooks_for(hooks, "PermissionRequest"))
        with host.interactive() as term:
            term.wait_ready()
            term.submit("Write hi")
            term.wait_for("Do you want to proceed?", 30)
            [call] = hooks.calls
            term.answer("Escape", "Do you want to proceed?")
            term.wait_for("Interrupted", 20)
            deadline = time.monotonic() + 5
            while call.closed_at is None and time.monotonic() < deadline:
                time.sleep(0.1)

    assert call.closed_at is not None
    assert not (host.project / "out.txt").exists()


def test_a_tool_that_fails_after_its_permission_fires_post_tool_use_failure_with_the_same_input(tmp_path):
    """Not PostToolUse: a tool that ran and failed (here WebFetch, offline) fires
    PostToolUseFailure, with the tool input of its PermissionRequest — what askcards settles a
    prompt answered in the terminal by (the hosts page's settings list both)."""
    claude.binary()
    fetch = ToolUse("WebFetch", {"url": "https://example.com/page", "prompt": "Summarize the page"})
    with HookServer(lambda call: permission_decision("allow") if call.event == "PermissionRequest" else {}) as hooks, \
            FakeAnthropic([fetch, Text("Done.")]) as api:
        host = Host(tmp_path, api, settings=hooks_for(hooks, "PermissionRequest", "PostToolUse", "PostToolUseFailure"))
        run = host.run_print("Fetch it")

    assert run.returncode == 0, run.stderr
    assert [call.event for call in hooks.calls] == ["PermissionRequest", "PostToolUseFailure"]
    asked, failed = hooks.calls
    assert failed.body["tool_name"] == "WebFetch" and failed.body["tool_input"] == asked.body["tool_input"]
    assert failed.body["session_id"] == asked.body["session_id"] and failed.body["error"]
