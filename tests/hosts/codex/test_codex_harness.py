"""The real Codex CLI (pinned in package-lock.json here) asks a PermissionRequest command hook before
it runs a command that needs approval, and does what the hook's stdout (or exit code) says.

These pin the wire askcards' ``/hooks/codex`` must speak: the event Codex writes on the hook's stdin
(events/*.json are real captures), the decision JSON it reads back, that a deny's message is what
the model is told, and that a hook which decides nothing, or outlives its timeout, leaves the
choice to Codex's own terminal prompt (a timed-out hook is killed, so a forwarding ``curl`` hangs up).
"""
from __future__ import annotations

import json
import os
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from .fake_responses import FakeResponsesAPI, message, shell_call
from tests.conftest import require

from .harness import CodexTUI, curl_hook_command, hook_command, recorded_events, require_codex, run_codex_exec

EVENTS = Path(__file__).resolve().parent / "events"
PROMPT = "make a marker file"
COMMAND = "touch marker"
JUSTIFICATION = "Create the marker file the task asks for"
FINAL = "The marker task is finished."
APPROVAL_PROMPT = "Would you like to run the following command?"


def script() -> list:
    """The model asks to run COMMAND outside the sandbox (which needs approval), then finishes."""
    return [shell_call(COMMAND, "call_marker", escalated=True, justification=JUSTIFICATION), message(FINAL)]


@pytest.fixture(autouse=True)
def codex_installed():
    require_codex()


def test_an_allowing_hook_lets_the_command_run_and_is_sent_the_documented_event(tmp_path):
    record = tmp_path / "hook-events"
    with FakeResponsesAPI(script()) as api, CodexTUI(tmp_path, api, hook_command(record, "allow"), prompt=PROMPT) as codex:
        codex.wait_for_screen(FINAL)

    assert (codex.workdir / "marker").exists(), "the hook allowed the command, so it ran"
    outputs = api.function_outputs("call_marker")
    assert len(outputs) == 1 and "Process exited with code 0" in outputs[0], outputs

    [event] = recorded_events(record)
    assert event["hook_event_name"] == "PermissionRequest"
    assert event["tool_name"] == "Bash"
    assert event["tool_input"] == {"command": COMMAND, "description": JUSTIFICATION}
    assert event["cwd"] == str(codex.workdir)
    assert event["model"] == "fake-model"
    assert event["permission_mode"] == "default"
    assert event["transcript_path"].startswith(str(codex.codex_home / "sessions"))
    turn = json.loads(api.headers[0]["x-codex-turn-metadata"])
    assert (event["session_id"], event["turn_id"]) == (turn["session_id"], turn["turn_id"]), "the ids are the thread's and turn's"


def test_a_denying_hook_stops_the_command_and_its_message_reaches_the_model(tmp_path):
    record = tmp_path / "hook-events"
    reason = "拒绝：请先在评审卡片上说明用途"
    with FakeResponsesAPI(script()) as api, CodexTUI(tmp_path, api, hook_command(record, "deny", reason), prompt=PROMPT) as codex:
        screen = codex.wait_for_screen(FINAL)

    assert not (codex.workdir / "marker").exists(), "the hook denied the command, so it never ran"
    assert "Blocked by hook" in screen and reason in screen
    assert APPROVAL_PROMPT not in screen, "a decision from the hook means no terminal prompt"
    [output] = api.function_outputs("call_marker")
    assert reason in output, f"the model must be told why: {output!r}"
    assert len(recorded_events(record)) == 1


def test_exit_code_2_with_a_reason_on_stderr_is_a_denial_too(tmp_path):
    record = tmp_path / "hook-events"
    with FakeResponsesAPI(script()) as api, CodexTUI(tmp_path, api, hook_command(record, "exit2", "askcards is unreachable"), prompt=PROMPT) as codex:
        codex.wait_for_screen(FINAL)

    assert not (codex.workdir / "marker").exists()
    [output] = api.function_outputs("call_marker")
    assert "askcards is unreachable" in output


def test_a_hook_that_decides_nothing_leaves_the_choice_to_the_terminal_prompt(tmp_path):
    record = tmp_path / "hook-events"
    with FakeResponsesAPI(script()) as api, CodexTUI(tmp_path, api, hook_command(record, "silent"), prompt=PROMPT) as codex:
        screen = codex.wait_for_screen(APPROVAL_PROMPT)
        assert COMMAND in screen and JUSTIFICATION in screen
        assert len(api.requests) == 1, "the turn waits on the person at the terminal"

    assert not (codex.workdir / "marker").exists()
    assert len(recorded_events(record)) == 1, "the hook was asked first"


def test_a_hook_past_its_timeout_is_killed_and_the_terminal_prompt_takes_over(tmp_path):
    record = tmp_path / "hook-events"
    with FakeResponsesAPI(script()) as api, CodexTUI(tmp_path, api, hook_command(record, "sleep"), prompt=PROMPT, hook_timeout=2) as codex:
        codex.wait_for(lambda: (record / "hook.pid").exists(), "start the hook")
        pid = int((record / "hook.pid").read_text())
        screen = codex.wait_for_screen(APPROVAL_PROMPT, seconds=20)
        assert "hook timed out after 2s" in screen
        codex.wait_for(lambda: not _alive(pid), "stop the timed-out hook", seconds=5)

    assert not (record / "slept-through").exists()
    assert not (codex.workdir / "marker").exists()


def test_a_reply_with_a_key_outside_codex_schema_is_invalid_and_the_prompt_takes_over(tmp_path):
    """Codex reads the decision strictly: one unknown key and the whole reply is ignored."""
    allow = (EVENTS / "permission_request.decision.allow.json").read_text().strip()
    extra = json.dumps({**json.loads(allow), "ask": {"id": 7}})
    command = f"cat > /dev/null; printf '%s\\n' '{extra}'"
    with FakeResponsesAPI(script()) as api, CodexTUI(tmp_path, api, command, prompt=PROMPT) as codex:
        screen = codex.wait_for_screen(APPROVAL_PROMPT)
    assert "hook returned invalid permission-request JSON output" in screen
    assert not (codex.workdir / "marker").exists()


class _DecisionServer(ThreadingHTTPServer):
    """What askcards' /hooks/codex will be, reduced to one fixed reply: records each request."""

    def __init__(self, reply: bytes) -> None:
        self.reply, self.seen = reply, []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                server.seen.append({"path": self.path, "headers": dict(self.headers), "body": body})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(server.reply)))
                self.end_headers()
                self.wfile.write(server.reply)

        super().__init__(("127.0.0.1", 0), Handler)


def test_a_curl_hook_forwards_the_event_and_codex_follows_the_reply(tmp_path):
    """The documented shape of hook (docs/agents/hosts.md): curl posts stdin with the agent key and prints the reply."""
    require(shutil.which("curl") is not None, "curl is missing")
    reason = "已拒绝：不允许在此目录写文件"
    deny = json.loads((EVENTS / "permission_request.decision.deny.json").read_text())
    deny["hookSpecificOutput"]["decision"]["message"] = reason
    server = _DecisionServer(json.dumps(deny, ensure_ascii=False).encode())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hooks/codex?session=sess-1&platform=feishu"
    try:
        with FakeResponsesAPI(script()) as api, CodexTUI(tmp_path, api, curl_hook_command(url, "agent-key-1"), prompt=PROMPT) as codex:
            codex.wait_for_screen(FINAL)
    finally:
        server.shutdown()
        server.server_close()

    [seen] = server.seen
    assert seen["path"] == "/hooks/codex?session=sess-1&platform=feishu"
    assert seen["headers"]["Authorization"] == "Bearer agent-key-1"
    event = json.loads(seen["body"])
    assert event["hook_event_name"] == "PermissionRequest" and event["tool_input"]["command"] == COMMAND
    assert not (codex.workdir / "marker").exists()
    [output] = api.function_outputs("call_marker")
    assert reason in output


def test_a_curl_hook_that_cannot_reach_its_server_leaves_the_choice_to_the_terminal_prompt(tmp_path):
    require(shutil.which("curl") is not None, "curl is missing")
    closed = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    url = f"http://127.0.0.1:{closed.server_address[1]}/hooks/codex?session=sess-1"
    closed.server_close()  # nothing listens there now
    with FakeResponsesAPI(script()) as api, CodexTUI(tmp_path, api, curl_hook_command(url, "agent-key-1", max_time=5), prompt=PROMPT) as codex:
        screen = codex.wait_for_screen(APPROVAL_PROMPT)
    assert "hook exited with code 7" in screen, "curl's 'could not connect'"
    assert not (codex.workdir / "marker").exists()


def test_codex_exec_never_runs_the_permission_request_hook(tmp_path):
    """``codex exec`` forces approval_policy "never": an escalation is refused outright, no hook is
    asked. askcards' Codex path is the interactive CLI (and app-server clients), not ``exec``."""
    require_codex(tui=False)
    record = tmp_path / "hook-events"
    with FakeResponsesAPI(script()) as api:
        done = run_codex_exec(tmp_path, api, hook_command(record, "allow"), prompt=PROMPT)

    assert done.returncode == 0, done.stderr
    assert recorded_events(record) == []
    [output] = api.function_outputs("call_marker")
    assert "approval policy is Never" in output
    assert not (tmp_path / "work" / "marker").exists()


@pytest.mark.parametrize("fixture_name, justification", [
    ("permission_request.json", JUSTIFICATION),
    ("permission_request.no_justification.json", ""),
])
def test_the_event_fixtures_have_the_shape_codex_sends(tmp_path, fixture_name, justification):
    """events/permission_request*.json are real captures (only the temporary paths rewritten): a new
    run of the pinned Codex sends the same keys with values of the same types. Without a
    justification from the model, ``tool_input`` has no ``description``."""
    fixture = json.loads((EVENTS / fixture_name).read_text())
    command = fixture["tool_input"]["command"]
    turns = [shell_call(command, "call_fixture", escalated=True, justification=justification), message(FINAL)]
    record = tmp_path / "hook-events"
    with FakeResponsesAPI(turns) as api, CodexTUI(tmp_path, api, hook_command(record, "allow"), prompt=PROMPT) as codex:
        codex.wait_for_screen(FINAL)
    [live] = recorded_events(record)
    assert _shape(live) == _shape(fixture)
    assert live["tool_input"] == fixture["tool_input"]


def _shape(value):
    if isinstance(value, dict):
        return {key: _shape(item) for key, item in value.items()}
    return type(value).__name__


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped) is not running
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
