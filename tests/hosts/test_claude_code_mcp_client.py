"""Claude Code as an MCP client of askcards: the real CLI (pinned in tests/hosts/package.json)
with askcards added the way docs/agents/mcp.md says (``claude mcp add --transport http``), a scripted
model turn calling ``ask_user_questions``, and alice answering on the panel after more than a
minute — past the 60 s at which clients without a longer timeout give up."""
from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

import pytest

from tests.conftest import QUESTIONS
from tests.hosts import claude
from tests.hosts.claude import Host
from tests.hosts.fake_anthropic import FakeAnthropic, Text, ToolUse
from tests.hosts.people import WEB_SESSION, askcards

ASK = ToolUse("mcp__askcards__ask_user_questions", {"questions": QUESTIONS}, id="toolu_askcards_1")
ANSWER_AFTER = 65  # seconds after the ask shows on the panel
WAIT = 60  # every wait in the interactive tests is bounded


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
def test_headless_claude_code_makes_a_blocking_call_in_either_negotiation_mode(tmp_path, negotiation):
    """``claude -p`` with ``MCP_PROTOCOL_NEGOTIATION`` ``auto`` or ``legacy`` (the values this
    version reads): it declares no tasks extension, so askcards never answers it with a task: the
    call blocks, holding its ask's lease, and the model reads the panel's answer. (The interactive
    CLI does declare it: ``test_interactive_claude_code_…`` below.)"""
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
    docs/agents/mcp.md keeps ``host=ask`` for interactive clients."""
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


# ------------------------------------------------------------------------- the interactive CLI

PERMITTED = {"permissions": {"allow": [ASK.name]}}


def _notification(api: FakeAnthropic) -> str:
    """The text of the last message Claude Code sent the model (a background task's notification)."""
    content: Any = api.requests[-1].body["messages"][-1]["content"]
    return content if isinstance(content, str) else "".join(block.get("text", "") for block in content)


def _until(term, key: str, shown: str, timeout: float = 15) -> None:
    """Press ``key`` until the screen shows ``shown`` (a form that has just opened ignores keys
    for a moment); each press waits a moment for the screen to follow."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        term.press(key)
        try:
            term.wait_for(shown, timeout=1.0)
            return
        except AssertionError:
            continue
    raise AssertionError(f"{key} did not bring {shown!r} within {timeout} s:\n{term.screen()}")


def _lease(data_dir, ask_id: str) -> Any:
    with sqlite3.connect(data_dir / "askcards.sqlite3") as db:
        return db.execute("select waiter_until from askcards_ask where id = ?", (ask_id,)).fetchone()[0]


def test_interactive_claude_code_makes_a_task_and_hands_the_answer_over_as_a_notification(tmp_path):
    """The interactive CLI (default negotiation, 2026-07-28 with an HTTP server) declares the tasks
    extension: askcards answers the call with a task, which Claude Code moves to the background
    (the model is told so and goes on), polls, and hands over as a task notification once alice
    answers on the panel, more than a minute later (past the 60 s at which a blocking call without a
    longer timeout gives up)."""
    data_dir = tmp_path / "askcards"
    with askcards(data_dir) as (base, key, alice), \
            FakeAnthropic([ASK, Text("Waiting for the answer."), Text("We use SQLite.")]) as api:
        alice.answers([["SQLite"]], after=ANSWER_AFTER)
        host = Host(tmp_path, api, settings=PERMITTED)
        added = host.run(["mcp", "add", "--transport", "http", "askcards", f"{base}/mcp?{WEB_SESSION}",
                          "--header", f"Authorization: Bearer {key}"])
        assert added.returncode == 0, added.stderr
        with host.interactive() as term:
            term.wait_ready()
            term.submit("Which database should we use? Ask me.")
            term.wait_for("We use SQLite.", ANSWER_AFTER + WAIT)
            [shown] = alice.shown
            ask_id = shown["requestId"]
            screen = term.screen()

    assert f"started server-side task {ask_id}" in api.tool_result_text(ASK.id)
    assert f"MCP task {ask_id} (askcards/ask_user_questions) completed" in screen
    assert "SQLite" in _notification(api)
    assert _lease(data_dir, ask_id) is None  # a task: read later by design


@pytest.mark.parametrize("choice,reason", [("Accept", "submitted"), ("Decline", "declined")])
def test_interactive_claude_code_shows_the_hosts_form_and_the_persons_answer_wins(tmp_path, choice, reason):
    """``host=ask``: the task's ``tasks/get`` is ``input_required``, and Claude Code shows the form
    in the terminal. The person picks SQLite and accepts (the ask is answered there, surface
    ``host``, and the panel closes the form) or declines (the person's answer: ``declined``, which
    the model reads in the task's notification)."""
    data_dir = tmp_path / "askcards"
    with askcards(data_dir) as (base, key, alice), \
            FakeAnthropic([ASK, Text("Waiting for the answer."), Text("Noted.")]) as api:
        alice.holds()
        host = Host(tmp_path, api, settings=PERMITTED)
        added = host.run(["mcp", "add", "--transport", "http", "askcards", f"{base}/mcp?{WEB_SESSION}&host=ask",
                          "--header", f"Authorization: Bearer {key}"])
        assert added.returncode == 0, added.stderr
        with host.interactive() as term:
            term.wait_ready()
            term.submit("Which database should we use? Ask me.")
            term.wait_for("requests your input", WAIT)
            _until(term, "Right", "◯ SQLite")  # the question's options open
            _until(term, "Down", "❯ ◯ SQLite")
            _until(term, "Enter", "✔ Database: SQLite")  # chosen
            _until(term, "Down", "❯ Accept")
            if choice == "Decline":
                _until(term, "Down", "❯ Decline")
            term.answer("Enter", "requests your input")
            term.wait_for("Noted.", WAIT)
            [shown] = alice.shown
            ask_id = shown["requestId"]
            ended = alice.wait_ended(ask_id)

    with sqlite3.connect(data_dir / "askcards.sqlite3") as db:
        status, why, result = db.execute("select status, reason, result from askcards_ask where id = ?",
                                         (ask_id,)).fetchone()
        surface = db.execute("select surface from askcards_askevent where ask_id = ? and kind = 'closed'",
                             (ask_id,)).fetchone()[0]
    assert (why, ended, surface) == (reason, reason, "host")
    if choice == "Accept":
        assert status == "answered"
        assert json.loads(json.loads(result)["tool_result"])["answers"][0]["selectedLabels"] == ["SQLite"]
        assert "SQLite" in _notification(api)
    else:
        assert status == "cancelled" and "用户拒绝回答" in _notification(api)


def test_interactive_claude_code_on_the_handshake_era_blocks(tmp_path):
    """``MCP_PROTOCOL_NEGOTIATION=legacy``: the interactive CLI declares no tasks at ``initialize``,
    so its call blocks (holding the ask's lease) and returns the panel's answer."""
    data_dir = tmp_path / "askcards"
    with askcards(data_dir) as (base, key, alice), FakeAnthropic([ASK, Text("We use SQLite.")]) as api:
        alice.answers([["SQLite"]], after=3)
        host = Host(tmp_path, api, settings=PERMITTED, env={"MCP_PROTOCOL_NEGOTIATION": "legacy"})
        added = host.run(["mcp", "add", "--transport", "http", "askcards", f"{base}/mcp?{WEB_SESSION}",
                          "--header", f"Authorization: Bearer {key}"])
        assert added.returncode == 0, added.stderr
        with host.interactive() as term:
            term.wait_ready()
            term.submit("Which database should we use? Ask me.")
            term.wait_for("We use SQLite.", WAIT)
            [shown] = alice.shown

    read = json.loads(api.tool_result_text(ASK.id))
    assert read["status"] == "answered" and read["ask"]["respondents"][0]["surface"] == "web"
    assert _lease(data_dir, shown["requestId"]) is not None  # a blocking call, not a task
