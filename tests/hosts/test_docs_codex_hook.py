"""The documented Codex hook, as written: its ``config.toml`` block is read out of the agent hosts
page (docs/agents/hosts.md, so the page cannot drift from what works), its ``command`` run through a shell as Codex runs it — with
``$ASKCARDS_KEY`` from the environment and the event on stdin — against a real ``serve``, only the
address changed to the test server's. What it prints is exactly what Codex reads: the decision
alice gave on her panel, or nothing (no decision). Its timeouts nest as the page says."""
from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from urllib.parse import parse_qs, urlsplit

from askcards.hosts import views
from tests import serving
from tests.hosts.people import askcards

HOSTS_PAGE = serving.ROOT / "docs" / "agents" / "hosts.md"
DOCUMENTED_BASE = "http://127.0.0.1:8000"
EVENT = {"session_id": "019a-codex", "turn_id": "019a-turn", "cwd": "/home/alice/shop",
         "hook_event_name": "PermissionRequest", "model": "gpt-5", "permission_mode": "default",
         "tool_name": "Bash", "tool_input": {"command": "touch marker", "description": "make the marker"}}


def documented_hook() -> dict:
    """The PermissionRequest command hook of the page's Codex ``config.toml`` block."""
    text = HOSTS_PAGE.read_text()
    section = text[text.index("**Codex**"):]
    block = re.search(r"```toml\n(.*?)```", section, re.S)
    assert block, "the hosts page's Codex section has no config.toml block"
    [hook] = tomllib.loads(block.group(1))["hooks"]["PermissionRequest"][0]["hooks"]
    return hook


def _run(command: str, key: str, event: dict) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "ASKCARDS_KEY": key}
    return subprocess.run(["sh", "-c", command], input=json.dumps(event), env=env, capture_output=True, text=True,
                          timeout=60)


def test_the_readmes_codex_timeouts_nest():
    """askcards gives up (no decision) before curl does, and curl before Codex: the card's deadline
    is never later than curl's give-up."""
    hook = documented_hook()
    command = hook["command"]
    max_time = int(re.search(r"--max-time (\d+)", command).group(1))
    [url] = re.findall(r"'(https?://[^']+)'", command)
    url_timeout = int(parse_qs(urlsplit(url).query)["timeout"][0])
    assert url_timeout - views.HOOK_MARGIN_SECONDS < max_time <= hook["timeout"], (url_timeout, max_time, hook)
    assert url_timeout <= max_time
    assert "$ASKCARDS_KEY" in command  # the key comes from the environment, never the file


def test_the_readmes_codex_command_prints_exactly_the_decision(tmp_path):
    hook = documented_hook()
    assert hook["type"] == "command" and DOCUMENTED_BASE in hook["command"]
    with askcards(tmp_path / "askcards") as (base, key, alice):
        command = hook["command"].replace(DOCUMENTED_BASE, base)
        alice.answers([["允许"]])
        allowed = _run(command, key, EVENT)
        alice.answers([["拒绝"]], custom="先别碰 marker")
        denied = _run(command, key, EVENT)
        not_asked = _run(command, key, {**EVENT, "hook_event_name": "PreToolUse"})
        [first, _] = alice.shown

    assert (allowed.returncode, allowed.stderr) == (0, "")
    assert json.loads(allowed.stdout) == {"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                                                                 "decision": {"behavior": "allow"}}}
    assert "touch marker" in first["questions"][0]["question"]
    decision = json.loads(denied.stdout)["hookSpecificOutput"]["decision"]
    assert decision["behavior"] == "deny" and decision["message"].endswith("先别碰 marker")
    assert (not_asked.returncode, not_asked.stdout, not_asked.stderr) == (0, "", "")  # no decision: Codex asks itself
