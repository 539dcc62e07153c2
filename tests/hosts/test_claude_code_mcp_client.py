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


@pytest.mark.parametrize("negotiation", ["auto", "legacy"])
def test_either_negotiation_mode_makes_a_blocking_call_never_a_task(tmp_path, negotiation):
    """``MCP_PROTOCOL_NEGOTIATION`` (this version reads ``auto`` or ``legacy``): whichever era it
    settles on, Claude Code declares no tasks extension to an HTTP server (it strips it from the
    capabilities it sends), so askcards never answers it with a task: the call blocks, holding its
    ask's lease, and the model reads the panel's answer."""
    data_dir = tmp_path / "askcards"
    with askcards(data_dir) as (base, key, alice), FakeAnthropic([ASK, Text("We use SQLite.")]) as api:
        alice.answers([["SQLite"]], after=3)
        host = Host(tmp_path, api, settings={}, env={"MCP_PROTOCOL_NEGOTIATION": negotiation})
        added = host.run(["mcp", "add", "--transport", "http", "askcards", f"{base}/mcp?{WEB_SESSION}",
                          "--header", f"Authorization: Bearer {key}"])
        assert added.returncode == 0, added.stderr
        run = host.run_print("Which database should we use? Ask me.",
                             args=["--allowedTools", "mcp__askcards__ask_user_questions"], timeout=90)
        [shown] = alice.shown

    assert run.returncode == 0, run.stderr
    read = json.loads(api.tool_result_text(ASK.id))
    assert read["status"] == "answered" and "task" not in read
    assert run.output()["result"] == "We use SQLite."
    with sqlite3.connect(data_dir / "askcards.sqlite3") as db:
        (lease,) = db.execute("select waiter_until from askcards_ask where id = ?", (shown["requestId"],)).fetchone()
    assert lease is not None, "a task holds no lease: the call was answered with a task"


@pytest.mark.parametrize("negotiation", ["auto", "legacy"])
def test_headless_claude_code_dismisses_the_hosts_form_at_once(tmp_path, negotiation):
    """``host=ask`` with ``claude -p``: this version declares form elicitation but, with nobody at
    a terminal, answers the form with ``cancel`` at once — on 2026-07-28 in the call's second
    round, on 2025-11-25 as the response to ``elicitation/create``. That is the person's answer
    by the rule (the ask ends ``dismissed``, before alice on the panel gets to it), which is why
    the README keeps ``host=ask`` for interactive clients."""
    data_dir = tmp_path / "askcards"
    with askcards(data_dir) as (base, key, alice), FakeAnthropic([ASK, Text("Nobody answered.")]) as api:
        alice.answers([["SQLite"]], after=10)
        host = Host(tmp_path, api, settings={}, env={"MCP_PROTOCOL_NEGOTIATION": negotiation})
        added = host.run(["mcp", "add", "--transport", "http", "askcards", f"{base}/mcp?{WEB_SESSION}&host=ask",
                          "--header", f"Authorization: Bearer {key}"])
        assert added.returncode == 0, added.stderr
        run = host.run_print("Which database should we use? Ask me.",
                             args=["--allowedTools", "mcp__askcards__ask_user_questions"], timeout=90)
        [shown] = alice.shown

    assert run.returncode == 0, run.stderr
    read = api.tool_result_text(ASK.id)  # what the model is handed: the person closed the form
    assert "用户关闭了提问，未作答" in read and "dismissed" in read
    with sqlite3.connect(data_dir / "askcards.sqlite3") as db:
        ended = db.execute("select status, reason from askcards_ask where id = ?", (shown["requestId"],)).fetchone()
        closed_on = db.execute("select surface from askcards_askevent where ask_id = ? and kind = 'closed'",
                               (shown["requestId"],)).fetchone()
    assert (ended, closed_on) == (("cancelled", "dismissed"), ("host",))
