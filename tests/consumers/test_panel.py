"""The panel socket protocol (SPEC §6.3) with Channels' WebsocketCommunicator."""
import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings

from askcards import services
from askcards.models import Ask, PanelPresence
from project.asgi import application
from tests.conftest import QUESTIONS, answer_for, person

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


@pytest.fixture
def web_surface(settings, recording_surface):
    settings.ASKCARDS_SURFACES = ["askcards.surfaces.web.WebSurface"]


@pytest.fixture
def users(db):
    return person("alice", "pw-alice-123"), person("bob", "pw-bob-123")


async def _panel(user, path="/ws/panel/"):
    """A socket through the whole ASGI stack, logged in with a real session cookie."""
    from django.test import Client

    client = Client()
    await database_sync_to_async(client.force_login)(user)
    cookie = f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}"
    communicator = WebsocketCommunicator(
        application, path, headers=[(b"cookie", cookie.encode()), (b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")]
    )
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    # Every connect starts with the user's recent history (closed asks), then what is pending.
    first = await communicator.receive_json_from(timeout=5)
    assert first["type"] == "history"
    communicator.history = first["asks"]
    return communicator


@database_sync_to_async
def _ask(agent, session):
    return services.tool_call(agent=agent, session=session, name="ask_user_questions", arguments={"questions": QUESTIONS})


async def test_panel_rejects_anonymous_socket(web_surface):
    communicator = WebsocketCommunicator(application, "/ws/panel/", headers=[(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")])
    connected, code = await communicator.connect(timeout=5)
    assert not connected and code == 4401


async def test_web_ask_without_panel_fails_no_surface(web_surface, agent, web_session):
    outcome = await _ask(agent, web_session)
    assert (outcome.status, json.loads(outcome.tool_result)["reason"]) == ("failed", "no_surface")


async def test_connected_panel_receives_new_ask_live(web_surface, agent, web_session, users):
    panel = await _panel(users[0])
    outcome = await _ask(agent, web_session)
    assert outcome.status == "pending" and outcome.ask.surfaces == ["web"]
    message = await panel.receive_json_from(timeout=5)
    assert message == {
        "type": "ask_user_questions",
        "requestId": outcome.ask.id,
        "sessionId": web_session.id,
        "agent": "agent-a",
        "session": "网页会话：web/alice",
        "questions": outcome.ask.questions,
        "deadline": outcome.ask.deadline.isoformat(),
    }
    await panel.disconnect()


async def test_panel_gets_pending_asks_on_connect(web_surface, agent, web_session, users):
    first = await _panel(users[0])
    outcome = await _ask(agent, web_session)
    await first.receive_json_from(timeout=5)
    await first.disconnect()
    again = await _panel(users[0])
    message = await again.receive_json_from(timeout=5)
    assert message["requestId"] == outcome.ask.id
    await again.disconnect()


async def test_panel_answer_wins_and_acks(web_surface, agent, web_session, users):
    panel = await _panel(users[0])
    outcome = await _ask(agent, web_session)
    await panel.receive_json_from(timeout=5)
    await panel.send_json_to({"type": "ask_user_questions_result", "requestId": outcome.ask.id, "answers": answer_for()})
    ack = await panel.receive_json_from(timeout=5)
    assert ack == {"type": "ask_user_questions_ack", "requestId": outcome.ask.id, "ok": True}
    ask = await database_sync_to_async(Ask.objects.get)(pk=outcome.ask.id)
    assert (ask.status, json.loads(ask.result["tool_result"])["answers"][0]["selectedLabels"]) == ("answered", ["PostgreSQL"])
    await panel.disconnect()


async def test_second_panel_told_when_first_answers(web_surface, agent, web_session, users):
    one, two = await _panel(users[0]), await _panel(users[0])
    outcome = await _ask(agent, web_session)
    await one.receive_json_from(timeout=5)
    await two.receive_json_from(timeout=5)
    await one.send_json_to({"type": "ask_user_questions_result", "requestId": outcome.ask.id, "answers": answer_for()})
    messages = [await two.receive_json_from(timeout=5)]
    # Where it was answered: the page reads 「已在网页回答。」.
    assert messages[0] == {"type": "ask_user_questions_cancelled", "requestId": outcome.ask.id, "reason": "submitted",
                           "surface": "web"}
    await one.disconnect()
    await two.disconnect()


async def test_every_tab_gets_the_answer_in_its_history_without_reading_it_again(
        web_surface, agent, web_session, users, monkeypatch):
    """The history line of an answered question ask (the person's own answers) comes with the push
    that closes it, made once where it was answered: the user's tabs, however many, list it without
    reading the ask again each."""
    from askcards.pages import consumers

    one, two = await _panel(users[0]), await _panel(users[0])
    outcome = await _ask(agent, web_session)
    await one.receive_json_from(timeout=5)
    await two.receive_json_from(timeout=5)

    async def no_reread(username, ask_id):
        raise AssertionError("a tab read the answered ask again")

    monkeypatch.setattr(consumers, "_history_add", no_reread)
    await one.send_json_to({"type": "ask_user_questions_result", "requestId": outcome.ask.id,
                            "answers": answer_for(labels=("SQLite",))})
    for tab in (one, two):
        messages = await _messages_until(tab, lambda got: "history_add" in {m["type"] for m in got})
        item = next(m["ask"] for m in messages if m["type"] == "history_add")
        assert (item["requestId"], item["status"], item["respondent"], item["surface"]) == (
            outcome.ask.id, "answered", "submitted", "web")
        assert item["answers"] == [{"question": "Database", "answer": "SQLite"}], item
    await one.disconnect()
    await two.disconnect()


async def test_panel_cannot_answer_other_users_ask(web_surface, agent, web_session, users):
    await _panel(users[0])  # alice is present, so the ask is pending
    outcome = await _ask(agent, web_session)
    bob = await _panel(users[1])
    await bob.send_json_to({"type": "ask_user_questions_result", "requestId": outcome.ask.id, "answers": answer_for()})
    ack = await bob.receive_json_from(timeout=5)
    assert ack["ok"] is False and ack["error"] == "not_found"
    ask = await database_sync_to_async(Ask.objects.get)(pk=outcome.ask.id)
    assert ask.status == "pending"
    await bob.disconnect()


async def test_panel_invalid_answer_acks_error_and_keeps_ask(web_surface, agent, web_session, users):
    panel = await _panel(users[0])
    outcome = await _ask(agent, web_session)
    await panel.receive_json_from(timeout=5)
    await panel.send_json_to({"type": "ask_user_questions_result", "requestId": outcome.ask.id, "answers": [{"selectedLabels": [], "customInput": ""}]})
    ack = await panel.receive_json_from(timeout=5)
    assert ack["ok"] is False and ack["error"].startswith("invalid")
    ask = await database_sync_to_async(Ask.objects.get)(pk=outcome.ask.id)
    assert ask.status == "pending"
    await panel.disconnect()


async def test_panel_told_when_agent_cancels(web_surface, agent, web_session, users):
    panel = await _panel(users[0])
    outcome = await _ask(agent, web_session)
    await panel.receive_json_from(timeout=5)
    await database_sync_to_async(services.ask_cancel)(ask=outcome.ask, actor="agent:a")
    assert await panel.receive_json_from(timeout=5) == {"type": "ask_user_questions_cancelled", "requestId": outcome.ask.id, "reason": "by_agent"}
    await panel.disconnect()


async def test_presence_ends_on_disconnect(web_surface, agent, web_session, users):
    panel = await _panel(users[0])
    assert await database_sync_to_async(PanelPresence.objects.filter(username="alice").count)() == 1
    await panel.disconnect()
    outcome = await _ask(agent, web_session)
    assert outcome.status == "failed"


async def test_malformed_message_gets_error_not_crash(web_surface, users):
    panel = await _panel(users[0])
    await panel.send_to(text_data="{not json")
    assert (await panel.receive_json_from(timeout=5))["type"] == "error"
    await panel.send_json_to({"type": "ask_user_questions_result", "requestId": 5})
    assert (await panel.receive_json_from(timeout=5))["ok"] is False
    await panel.disconnect()


async def test_reconnecting_panel_learns_how_its_open_asks_ended(web_surface, agent, web_session, users):
    panel = await _panel(users[0])
    cancelled, answered, still_open = [await _ask(agent, web_session) for _ in range(3)]
    for _ in range(3):
        await panel.receive_json_from(timeout=5)
    await panel.disconnect()
    # While the page is away, one ask is cancelled by the agent and the other answered on Feishu.
    await database_sync_to_async(services.ask_cancel)(ask=cancelled.ask, actor="agent:a")
    await database_sync_to_async(services.ask_answer)(ask_id=answered.ask.id, answers=answer_for(), surface="feishu")
    again = await _panel(users[0], f"/ws/panel/?known={cancelled.ask.id},{answered.ask.id}")
    messages = [await again.receive_json_from(timeout=5) for _ in range(3)]
    assert [(m["type"], m["requestId"], m.get("reason")) for m in messages] == [
        ("ask_user_questions", still_open.ask.id, None),
        ("ask_user_questions_cancelled", cancelled.ask.id, "by_agent"),
        ("ask_user_questions_cancelled", answered.ask.id, "submitted"),
    ]
    assert await again.receive_nothing(timeout=0.2)
    await again.disconnect()


async def test_reconnect_never_reveals_another_users_asks(web_surface, agent, web_session, users):
    panel = await _panel(users[0])
    outcome = await _ask(agent, web_session)
    await panel.receive_json_from(timeout=5)
    await database_sync_to_async(services.ask_cancel)(ask=outcome.ask, actor="agent:a")
    bob = await _panel(users[1], f"/ws/panel/?known={outcome.ask.id}")
    assert await bob.receive_nothing(timeout=0.3)
    await bob.disconnect()
    await panel.disconnect()


async def _messages_until(panel, done, timeout: float = 5.0) -> list[dict]:
    """Every message the socket gets until ``done(messages)`` holds (or ``timeout`` s pass)."""
    import asyncio

    messages: list[dict] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not done(messages) and loop.time() < deadline:
        try:
            messages.append(await panel.receive_json_from(timeout=max(0.01, deadline - loop.time())))
        except asyncio.TimeoutError:
            break
    return messages


async def test_panel_catches_up_on_pushes_it_never_got(web_surface, agent, web_session, users, monkeypatch):
    """A push is a hint the bus may drop (what is published while Redis is away, or a process is
    subscribing again, reaches nobody there): at its next heartbeat the socket is sent the new ask whose push never came, and
    told how an ask it shows ended without one — each once."""
    from askcards.surfaces import web

    monkeypatch.setattr(web, "HEARTBEAT_SECONDS", 0.2)
    monkeypatch.setattr(web, "PUSH_GRACE_SECONDS", 0.05)
    panel = await _panel(users[0])
    shown = await _ask(agent, web_session)
    assert (await panel.receive_json_from(timeout=5))["requestId"] == shown.ask.id
    monkeypatch.setattr(web.WebSurface, "_push", lambda self, ask, message: None)  # every push lost from now on
    unseen = await _ask(agent, web_session)
    await database_sync_to_async(services.ask_answer)(ask_id=shown.ask.id, answers=answer_for(), surface="feishu")

    messages = await _messages_until(panel, lambda got: {"ask_user_questions", "history_add"} <= {m["type"] for m in got})
    got = [(m["type"], m.get("requestId") or m["ask"]["requestId"]) for m in messages]
    assert sorted(got) == sorted([
        ("ask_user_questions", unseen.ask.id),
        ("ask_user_questions_cancelled", shown.ask.id),
        ("history_add", shown.ask.id),
    ]), got
    new = next(m for m in messages if m["type"] == "ask_user_questions")
    assert new["questions"] == unseen.ask.questions
    cancelled = next(m for m in messages if m["type"] == "ask_user_questions_cancelled")
    assert cancelled["reason"] == "submitted"
    assert await panel.receive_nothing(timeout=0.6)  # three more beats: nothing said twice
    await panel.disconnect()


async def test_a_bus_lost_or_back_has_the_panel_catch_up_at_once(web_surface, agent, web_session, users, monkeypatch):
    """What was published while the bus was away reached no process: when it is lost and when it
    is back (the hub's REREAD to every member), the panel sockets catch up at once, as the parked
    long-polls re-read, not at their next heartbeat half a minute later."""
    from askcards.wake.hub import HUB, REREAD
    from askcards.surfaces import web

    monkeypatch.setattr(web, "PUSH_GRACE_SECONDS", 0.05)
    assert web.HEARTBEAT_SECONDS >= 30
    panel = await _panel(users[0])
    monkeypatch.setattr(web.WebSurface, "_push", lambda self, ask, message: None)  # the bus is away: lost
    unseen = await _ask(agent, web_session)
    assert await panel.receive_nothing(timeout=0.5)

    HUB.broadcast({"type": REREAD})  # the bus is back
    message = await panel.receive_json_from(timeout=5)
    assert (message["type"], message["requestId"]) == ("ask_user_questions", unseen.ask.id)
    assert await panel.receive_nothing(timeout=0.5)
    await panel.disconnect()


async def test_a_panel_socket_leaves_no_cycle_behind_once_closed(web_surface, agent, web_session, users):
    """What an open panel socket held is freed as it closes, by reference counting, after it has
    answered and been told of another's answer: none of it is left in a reference cycle, which
    only the rare collection of everything would find (tests/cycles.py)."""
    from tests.cycles import Cycles

    one, two = await _panel(users[0]), await _panel(users[0])
    outcome = await _ask(agent, web_session)
    await one.receive_json_from(timeout=5)
    await two.receive_json_from(timeout=5)
    cycles = Cycles()
    cycles.mark()
    await one.send_json_to({"type": "ask_user_questions_result", "requestId": outcome.ask.id, "answers": answer_for()})
    assert (await one.receive_json_from(timeout=5))["ok"] is True
    assert (await two.receive_json_from(timeout=5))["type"] == "ask_user_questions_cancelled"
    await one.disconnect()
    await two.disconnect()
    assert cycles.left() == []
