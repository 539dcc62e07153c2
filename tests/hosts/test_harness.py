"""The harness itself, against the real pinned Claude Code CLI, a fake Messages API and a recording
hook server of our own: what a person would see is a command that ran or did not, and what the
model was told."""
from __future__ import annotations

import json
from pathlib import Path

from tests.hosts import claude
from tests.hosts.claude import Host, http_hook, http_hooks
from tests.hosts.fake_anthropic import FakeAnthropic, Text, ToolUse
from tests.hosts.hook_server import HookServer, permission_decision

EVENTS = Path(__file__).resolve().parent / "events"
KEY = "agent-key-123"
WRITE_HI = ToolUse("Bash", {"command": "echo hi > out.txt", "description": "Write hi to out.txt"})
QUESTION = "Which database should we use?"


def askcards_hook(server: HookServer, **options) -> dict:
    """The PermissionRequest hook as askcards documents it: Bearer key from the environment."""
    hook = http_hook(server.url("/hooks/claude-code?session=s1"), headers={"Authorization": "Bearer $ASKCARDS_KEY"},
                     allowed_env_vars=["ASKCARDS_KEY"], **options)
    return http_hooks({"PermissionRequest": hook})


def test_a_command_the_hook_allows_runs(tmp_path):
    claude.binary()
    with HookServer(lambda call: permission_decision("allow")) as hooks, \
            FakeAnthropic([WRITE_HI, Text("Wrote it.")]) as api:
        host = Host(tmp_path, api, settings=askcards_hook(hooks), env={"ASKCARDS_KEY": KEY})
        run = host.run_print("Write hi to out.txt")

    assert run.returncode == 0, run.stderr
    assert (host.project / "out.txt").read_text() == "hi\n"
    assert run.result == "Wrote it."
    [call] = hooks.calls
    assert call.path == "/hooks/claude-code?session=s1"
    assert call.headers["Authorization"] == f"Bearer {KEY}"
    assert call.body["hook_event_name"] == "PermissionRequest"
    assert call.body["tool_name"] == "Bash"
    assert call.body["tool_input"]["command"] == "echo hi > out.txt"
    assert call.body["cwd"] == str(host.project)
    # The captured fixture has the same fields as what this binary sends now.
    assert set(call.body) == set(json.loads((EVENTS / "permission_request_bash.json").read_text()))
    assert api.tool_result_text("toolu_fake_0_0") == "(Bash completed with no output)"


def test_a_command_the_hook_denies_does_not_run_and_the_model_gets_the_reason(tmp_path):
    claude.binary()
    with HookServer(lambda call: permission_decision("deny", message="not now")) as hooks, \
            FakeAnthropic([WRITE_HI, Text("Understood.")]) as api:
        host = Host(tmp_path, api, settings=askcards_hook(hooks), env={"ASKCARDS_KEY": KEY})
        run = host.run_print("Write hi to out.txt")

    assert run.returncode == 0, run.stderr
    assert not (host.project / "out.txt").exists()
    assert len(hooks.events("PermissionRequest")) == 1
    result = api.tool_results()["toolu_fake_0_0"]
    assert result["is_error"] is True and result["content"] == "not now"
    assert [d["tool_name"] for d in run.output()["permission_denials"]] == ["Bash"]


def test_without_a_decision_from_the_hook_the_command_does_not_run(tmp_path):
    """The control for the two above: in -p mode the CLI itself never lets this command run."""
    claude.binary()
    with HookServer(lambda call: {}) as hooks, FakeAnthropic([WRITE_HI, Text("Could not.")]) as api:
        host = Host(tmp_path, api, settings=askcards_hook(hooks), env={"ASKCARDS_KEY": KEY})
        run = host.run_print("Write hi to out.txt")

    assert run.returncode == 0, run.stderr
    assert len(hooks.events("PermissionRequest")) == 1
    assert not (host.project / "out.txt").exists()
    assert "needs approval" in api.tool_result_text("toolu_fake_0_0")


def test_interactive_ask_user_question_answered_through_the_hook(tmp_path):
    claude.binary()
    questions = {"questions": [{
        "question": QUESTION, "header": "Database", "multiSelect": False,
        "options": [{"label": "PostgreSQL", "description": "Relational"}, {"label": "SQLite", "description": "Embedded"}],
    }]}

    def answer(call):
        if call.body.get("tool_name") != "AskUserQuestion":
            return {}
        return permission_decision("allow", updated_input={**call.body["tool_input"], "answers": {QUESTION: "PostgreSQL"}})

    with HookServer(answer) as hooks, FakeAnthropic([ToolUse("AskUserQuestion", questions), Text("PostgreSQL it is.")]) as api:
        host = Host(tmp_path, api, settings=askcards_hook(hooks), env={"ASKCARDS_KEY": KEY})
        with host.interactive() as term:
            term.wait_ready()
            term.submit("Ask me which database to use")
            screen = term.wait_for("PostgreSQL it is.", 30)

    assert "Answered Claude's questions" in screen and f"{QUESTION} → PostgreSQL" in screen
    [call] = hooks.events("PermissionRequest")
    assert call.body["tool_name"] == "AskUserQuestion"
    assert call.body["tool_input"] == questions
    assert call.headers["Authorization"] == f"Bearer {KEY}"
    assert f'"{QUESTION}"="PostgreSQL"' in api.tool_result_text("toolu_fake_0_0")
