"""Claude Code as an MCP client of askcards: the real CLI (pinned in tests/hosts/package.json)
with askcards added the way the README says (``claude mcp add --transport http``), a scripted
model turn calling ``ask_user_questions``, and alice answering on the panel after more than a
minute — past the 60 s at which clients without a longer timeout give up."""
from __future__ import annotations

import json
import sqlite3
import time

import pytest

from tests.conftest import QUESTIONS
from tests.hosts import claude
from tests.hosts.claude import Host
from tests.hosts.fake_anthropic import FakeAnthropic, Text, ToolUse
from tests.hosts.people import WEB_SESSION, askcards

ASK = ToolUse("mcp__askcards__ask_user_questions", {"questions": QUESTIONS}, id="toolu_askcards_1")
ANSWER_AFTER = 65  # seconds after the ask shows on the panel


@pytest.fixture(autouse=True)
def claude_installed():
    claude.binary()


def test_claude_code_waits_past_a_minute_and_the_model_reads_the_panels_answer(tmp_path):
    data_dir = tmp_path / "askcards"
    with askcards(data_dir) as (base, key, alice), FakeAnthropic([ASK, Text("We use SQLite.")]) as api:
        alice.answers([["SQLite"]], after=ANSWER_AFTER)
        host = Host(tmp_path, api, settings={})
        added = host.run(["mcp", "add", "--transport", "http", "askcards", f"{base}/mcp?{WEB_SESSION}",
                          "--header", f"Authorization: Bearer {key}"])
        assert added.returncode == 0, added.stderr
        started = time.monotonic()
        run = host.run_print("Which database should we use? Ask me.",
                             args=["--allowedTools", "mcp__askcards__ask_user_questions"], timeout=ANSWER_AFTER + 90)
        took = time.monotonic() - started
        [shown] = alice.shown

    assert run.returncode == 0, run.stderr
    assert took > ANSWER_AFTER
    assert shown["questions"][0]["question"] == QUESTIONS[0]["question"]
    # This version hands the model the result's structuredContent (the REST body {status, ask,
    # tool_result}) rather than its text content; the answer is in it either way.
    read = json.loads(api.tool_result_text(ASK.id))
    assert read["status"] == "answered"
    assert json.loads(read["tool_result"])["answers"][0]["selectedLabels"] == ["SQLite"]
    assert run.output()["result"] == "We use SQLite."
    with sqlite3.connect(data_dir / "askcards.sqlite3") as db:
        delivered, lease = db.execute("select result_delivered_at, waiter_until from askcards_ask where id = ?",
                                      (shown["requestId"],)).fetchone()
    assert delivered is not None  # the CLI's read took the result
    # How this version waits: a blocking call holds a lease on its ask, a task none.
    print(f"\nClaude Code {claude.VERSION} waited {took:.0f} s as a {'blocking call' if lease else 'task'}")
