"""Concurrent endings of one ask on SQLite, from threads of one process (SPEC §5 rule 1).

``serve`` runs the ASGI app and the worker in one process over a thread pool, so on the embedded
default several transitions of one ask can race in threads. Every race here lets 8 threads (6
answers from two surfaces, one agent cancel, one deadline expiry) start together behind a
barrier; exactly one must win and every loser must leave only an "ignored" audit row.

pytest-django's SQLite test database is in-memory with a shared cache, where concurrent writers
fail at once with "database table is locked" instead of waiting. So this module points the
``default`` alias at a temporary SQLite *file*, configured like production (WAL, IMMEDIATE
transactions, busy timeout from project.settings), for the duration of the module only.
"""
from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection, connections
from django.utils import timezone

from askcards import services
from askcards.models import Ask, AskEvent, OutboxEvent, Respondent
from tests.conftest import QUESTIONS, answer_for

ROUNDS = 5  # asks raced one after the other
ANSWERERS = (("web", "a0"), ("feishu", "a1"), ("web", "a2"), ("feishu", "a3"), ("web", "a4"), ("feishu", "a5"))
THREAD_TIMEOUT = 60  # seconds; SQLite's busy timeout is 30
# Contender names: "answer:<surface>:<custom answer text>", "cancel" (by the agent), "expire".
ALL_CONTENDERS = [f"answer:{surface}:{label}" for surface, label in ANSWERERS] + ["cancel", "expire"]
ANSWER_CONTENDERS = [f"answer:{surface}:{label}" for surface, label in ANSWERERS + (("feishu", "a6"), ("web", "a7"))]


@pytest.fixture(scope="module", autouse=True)
def sqlite_file_database(django_db_setup, django_db_blocker, tmp_path_factory):
    """Swap the ``default`` alias to a migrated SQLite file for this module, then swap it back.

    The in-memory test database stays open (its connection is kept aside, never closed), so the
    rest of the session still finds it. New threads build their connection from
    ``connections.settings``, so they see the file as well.
    """
    if connections["default"].vendor != "sqlite":
        pytest.skip("these races are SQLite's (the embedded default); PostgreSQL's are in tests/scale")
    original_wrapper = connections["default"]
    original_settings = connections.settings["default"]
    path = tmp_path_factory.mktemp("sqlite-races") / "races.sqlite3"
    file_settings = {**original_settings, "NAME": str(path), "TEST": {**original_settings.get("TEST", {})}}
    file_settings["TEST"]["NAME"] = str(path)
    connections.settings["default"] = file_settings
    connections["default"] = connections.create_connection("default")
    try:
        assert not connection.is_in_memory_db()
        with django_db_blocker.unblock():
            call_command("migrate", interactive=False, verbosity=0)
        yield path
    finally:
        with django_db_blocker.unblock():
            connections["default"].close()
        connections.settings["default"] = original_settings
        connections["default"] = original_wrapper


def _new_pending_ask(agent, session) -> Ask:
    outcome = services.tool_call(
        agent=agent, session=session, name="ask_user_questions", arguments={"questions": QUESTIONS}
    )
    assert outcome.status == "pending"
    return outcome.ask


def _race(ask_id: str, contenders: list[str]) -> dict[str, object]:
    """Start the contenders together against one ask; returns {contender: True/False or the exception}.

    The deadline is moved into the past first, so the "expire" contender is a real contender.
    """
    Ask.objects.filter(pk=ask_id).update(deadline=timezone.now() - timedelta(seconds=1))
    barrier = threading.Barrier(len(contenders))
    results: dict[str, object] = {}

    def run(name: str) -> None:
        try:
            ask = Ask.objects.select_related("session", "agent").get(pk=ask_id)  # loaded before the start
            barrier.wait(timeout=THREAD_TIMEOUT)
            if name == "cancel":
                results[name] = services.ask_cancel(ask=ask, reason=Ask.Reason.BY_AGENT, actor="agent:agent-a")
            elif name == "expire":
                results[name] = services.ask_expire(ask=ask)
            else:
                _, surface, label = name.split(":")
                outcome = services.ask_answer(ask_id=ask_id, answers=answer_for(custom=label), surface=surface)
                results[name] = outcome.accepted
        except BaseException as exc:  # reported by the assertion below, with its name
            results[name] = exc
            barrier.abort()  # the others stop waiting at once instead of at the timeout
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(name,), name=name) for name in contenders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=THREAD_TIMEOUT)
    assert not [thread.name for thread in threads if thread.is_alive()], "a contender hung"
    return results


def _expected_ending(winner: str) -> tuple[str, str]:
    if winner == "cancel":
        return Ask.Status.CANCELLED, Ask.Reason.BY_AGENT
    if winner == "expire":
        return Ask.Status.EXPIRED, Ask.Reason.TIMEOUT
    return Ask.Status.ANSWERED, Ask.Reason.SUBMITTED


def _assert_one_winner(agent, session, contenders: list[str]) -> list[str]:
    """Race ROUNDS fresh asks; check each ended exactly once. Returns the winners."""
    winners = []
    for _ in range(ROUNDS):
        ask = _new_pending_ask(agent, session)
        results = _race(ask.id, contenders)

        errors = {name: result for name, result in results.items() if not isinstance(result, bool)}
        assert not errors, f"contenders raised instead of winning or losing: {errors!r}"
        won = [name for name, result in results.items() if result]
        assert len(won) == 1, f"expected exactly one winner, got {won}"
        winner = won[0]
        winners.append(winner)
        losers = len(results) - 1

        ask.refresh_from_db()
        assert (ask.status, ask.reason) == _expected_ending(winner)
        closed = list(AskEvent.objects.filter(ask=ask, kind=AskEvent.Kind.CLOSED))
        assert len(closed) == 1
        assert AskEvent.objects.filter(ask=ask, kind=AskEvent.Kind.IGNORED).count() == losers
        assert OutboxEvent.objects.filter(ask=ask, type=OutboxEvent.Type.ASK_CLOSED).count() == 1
        assert OutboxEvent.objects.get(ask=ask).data == {"status": ask.status, "reason": ask.reason}

        respondent = Respondent.objects.get(ask=ask)
        if winner.startswith("answer:"):
            _, surface, label = winner.split(":")
            assert ask.result["answers"][0]["customInput"] == label
            assert respondent.status == Respondent.Status.SUBMITTED
            assert respondent.surface == surface == closed[0].surface
            assert respondent.answers[0]["customInput"] == label
        else:
            assert respondent.status != Respondent.Status.SUBMITTED
            assert respondent.answers is None
            assert respondent.answered_at is None

    seqs = list(OutboxEvent.objects.filter(agent=agent).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, ROUNDS + 1)), "outbox seq must be gap-free per agent"
    return winners


@pytest.mark.django_db(transaction=True)
def test_answer_cancel_and_expiry_racing_end_the_ask_once(agent, present_session):
    _assert_one_winner(agent, present_session, ALL_CONTENDERS)


@pytest.mark.django_db(transaction=True)
def test_answers_racing_from_two_surfaces_keep_only_the_winner(agent, present_session):
    winners = _assert_one_winner(agent, present_session, ANSWER_CONTENDERS)
    assert all(winner.startswith("answer:") for winner in winners)
