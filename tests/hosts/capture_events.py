"""Re-capture tests/hosts/events/*.json from the pinned Claude Code CLI (after a version bump):

    /work/main/.venv/bin/python -m tests.hosts.capture_events

Each fixture is the exact JSON body one ``"type": "http"`` hook POSTed (volatile ids, paths and
ports as they came); ``headers.json`` holds the request headers of one of them. Two runs: one
``claude -p`` through Bash, Write, Edit, WebFetch and two MCP tools (one of them elicits), every
hook allowing; one interactive run in tmux for AskUserQuestion (single and multiSelect) and the
Notification that a permission dialog left to the terminal sends. In the first run the second
elicitation gets no decision from its hook, so ``-p`` cancels it (ElicitationResult, Notification).
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.hosts import claude
from tests.hosts.claude import Host, http_hook, http_hooks
from tests.hosts.fake_anthropic import FakeAnthropic, Text, ToolUse
from tests.hosts.hook_server import HookCall, HookServer, permission_decision
from tests.hosts.mcp_server import McpServer

EVENTS_DIR = Path(__file__).resolve().parent / "events"
KEY = "askcards-agent-key-for-capture"

ONE_QUESTION = {"questions": [{
    "question": "Which database should we use?", "header": "Database", "multiSelect": False,
    "options": [{"label": "PostgreSQL", "description": "Relational"}, {"label": "SQLite", "description": "Embedded"}],
}]}
TWO_QUESTIONS = {"questions": [
    {"question": "Which features do you want?", "header": "Features", "multiSelect": True,
     "options": [{"label": "Search", "description": "Full-text search"}, {"label": "Export", "description": "CSV export"},
                 {"label": "Audit", "description": "Audit log"}]},
    ONE_QUESTION["questions"][0],
]}
ANSWERS = {"Which database should we use?": "PostgreSQL", "Which features do you want?": "Search, Audit"}


def hook_settings(url: str, events: list[str]) -> dict[str, Any]:
    hook = http_hook(url, headers={"Authorization": "Bearer $ASKCARDS_KEY"}, allowed_env_vars=["ASKCARDS_KEY"])
    return http_hooks({event: hook for event in events})


def first(calls: list[HookCall], event: str, tool: str | None = None) -> HookCall:
    for call in calls:
        if call.event == event and (tool is None or call.body.get("tool_name") == tool):
            return call
    raise SystemExit(f"no {event} {tool or ''} hook call was captured; got {[(c.event, c.body.get('tool_name')) for c in calls]}")


def print_mode_run(binary: Path, out: dict[str, Any]) -> None:
    elicited = []

    def respond(call: HookCall) -> Any:
        if call.event == "PermissionRequest":
            return permission_decision("allow")
        if call.event == "Elicitation" and not elicited:  # the second one gets no decision: -p cancels it
            elicited.append(call)
            return {"hookSpecificOutput": {"hookEventName": "Elicitation", "action": "accept",
                                           "content": {"database": "PostgreSQL", "reason": "relational"}}}
        return {}

    with tempfile.TemporaryDirectory() as tmp, HookServer(respond) as hooks, McpServer() as mcp:
        project = Path(tmp).resolve() / "project"
        turns = [
            ToolUse("Bash", {"command": "touch made.txt", "description": "Create made.txt"}),
            ToolUse("Bash", {"command": "python3 -c \"print('hi')\"", "description": "Print hi"}),
            ToolUse("Write", {"file_path": str(project / "notes.txt"), "content": "one\ntwo\nthree\n"}),
            ToolUse("Edit", {"file_path": str(project / "notes.txt"), "old_string": "two", "new_string": "TWO"}),
            ToolUse("WebFetch", {"url": "https://example.com/page", "prompt": "Summarize the page"}),
            ToolUse(f"mcp__{mcp.name}__echo", {"text": "hello"}),
            ToolUse(f"mcp__{mcp.name}__pick_database", {}),
            ToolUse(f"mcp__{mcp.name}__pick_database", {}),
            Text("Finished."),
        ]
        events = ["UserPromptSubmit", "PreToolUse", "PermissionRequest", "PostToolUse", "PostToolUseFailure",
                  "Elicitation", "ElicitationResult", "Notification", "Stop", "SessionEnd"]
        with FakeAnthropic(turns) as api:
            host = Host(Path(tmp), api, claude=binary, settings=hook_settings(hooks.url(), events), env={"ASKCARDS_KEY": KEY})
            (Path(tmp) / "mcp.json").write_text(json.dumps(mcp.config()))
            run = host.run_print("Make and edit notes, fetch a page, use the MCP tools.",
                                 args=["--mcp-config", str(Path(tmp) / "mcp.json")], timeout=120)
            if run.returncode != 0:
                raise SystemExit(f"claude -p failed: {run.stdout} {run.stderr}")
        calls = hooks.calls
        bash = first(calls, "PermissionRequest", "Bash")
        out["headers"] = bash.headers
        out["permission_request_bash"] = bash.body  # suggests the project directory / acceptEdits
        out["permission_request_bash_rule"] = [  # suggests an allow rule for the command
            c for c in calls if c.event == "PermissionRequest" and c.body.get("tool_name") == "Bash"][1].body
        out["permission_request_write"] = first(calls, "PermissionRequest", "Write").body
        out["permission_request_edit"] = first(calls, "PermissionRequest", "Edit").body
        out["permission_request_webfetch"] = first(calls, "PermissionRequest", "WebFetch").body
        out["permission_request_mcp_tool"] = first(calls, "PermissionRequest", f"mcp__{mcp.name}__echo").body
        out["pre_tool_use_bash"] = first(calls, "PreToolUse", "Bash").body
        out["post_tool_use_bash"] = first(calls, "PostToolUse", "Bash").body
        out["post_tool_use_edit"] = first(calls, "PostToolUse", "Edit").body
        out["post_tool_use_failure_webfetch"] = first(calls, "PostToolUseFailure", "WebFetch").body
        out["elicitation"] = first(calls, "Elicitation").body
        out["elicitation_result_cancel"] = first(calls, "ElicitationResult").body
        out["notification_elicitation_response"] = first(calls, "Notification").body
        out["user_prompt_submit"] = first(calls, "UserPromptSubmit").body
        out["stop"] = first(calls, "Stop").body
        out["session_end"] = first(calls, "SessionEnd").body


def interactive_run(binary: Path, out: dict[str, Any]) -> None:
    def respond(call: HookCall) -> Any:
        if call.event == "PermissionRequest" and call.body.get("tool_name") == "AskUserQuestion":
            given = dict(call.body["tool_input"])
            given["answers"] = {q["question"]: ANSWERS[q["question"]] for q in given["questions"]}
            return permission_decision("allow", updated_input=given)
        return {}  # no decision: the terminal's dialog asks, and Notification follows

    with tempfile.TemporaryDirectory() as tmp, HookServer(respond) as hooks:
        turns = [ToolUse("AskUserQuestion", ONE_QUESTION), ToolUse("AskUserQuestion", TWO_QUESTIONS),
                 ToolUse("Bash", {"command": "touch asked.txt", "description": "Create asked.txt"}), Text("Finished.")]
        with FakeAnthropic(turns) as api:
            host = Host(Path(tmp), api, claude=binary, settings=hook_settings(hooks.url(), ["PermissionRequest", "Notification"]),
                        env={"ASKCARDS_KEY": KEY})
            with host.interactive() as term:
                term.wait_ready()
                term.submit("Ask me, then create asked.txt.")
                term.wait_for("Do you want to proceed?", 30)
                hooks.wait_for(lambda c: c.event == "Notification", 30)
                term.answer("Enter", "Do you want to proceed?")
                term.wait_for("Finished.", 30)
        calls = hooks.calls
        asks = [c for c in calls if c.event == "PermissionRequest" and c.body.get("tool_name") == "AskUserQuestion"]
        out["permission_request_ask_user_question"] = asks[0].body
        out["permission_request_ask_user_question_multiselect"] = asks[1].body
        out["notification_permission_prompt"] = first(calls, "Notification").body


def main() -> None:
    binary, why = claude.install()
    if binary is None:
        raise SystemExit(why)
    out: dict[str, Any] = {}
    print_mode_run(binary, out)
    interactive_run(binary, out)
    EVENTS_DIR.mkdir(exist_ok=True)
    for name, body in out.items():
        (EVENTS_DIR / f"{name}.json").write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n")
    (EVENTS_DIR / "VERSION").write_text(claude.VERSION + "\n")
    print(f"wrote {len(out)} fixtures to {EVENTS_DIR} from Claude Code {claude.VERSION}", file=sys.stderr)


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"{time.monotonic() - started:.0f} s", file=sys.stderr)
