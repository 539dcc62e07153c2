"""Issue 10 point 12: the web panel socket (/ws/panel/) under hypothesis fuzzing (bounded).

A logged-in user's socket, through the whole ASGI stack, gets random frames: text that is not
JSON, JSON of any shape, answer messages with wrong types, NUL, lone surrogates, deep nesting,
huge ``customInput`` and binary frames. Every frame is answered (an ``error`` or an ack), the
socket is never dropped (no 1011, no exception out of the consumer), and afterwards a valid
answer on the same socket is still accepted.
"""
from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.test import Client
from hypothesis import example, given
from hypothesis import strategies as st

from askcards import services
from askcards.models import Ask, PanelPresence
from project.asgi import application
from tests.conftest import QUESTIONS, answer_for, grant, person

from .strategies import FUZZ_SOCKET, HUGE, Bytes, Raw, Text, deep, deep_object, hostile_values, render

pytestmark = pytest.mark.django_db(transaction=True)

ASK_ID = "ASK_ID_HERE"
REPLY_TIMEOUT = 2
# The panel's own news, not replies.
PUSHES = {"ask_user_questions", "ask_user_questions_cancelled", "dingtalk_form", "dingtalk_form_responded",
          "history", "history_add"}


@pytest.fixture
def panel_world(settings, agent, web_session):
    settings.ASKCARDS_SURFACES = ["askcards.surfaces.web.WebSurface"]
    user = person("alice")
    client = Client()
    client.force_login(user)
    cookie = f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}"
    return {"cookie": cookie, "agent": agent, "session": web_session}


def pending_ask(world) -> Ask:
    ask = Ask.objects.filter(session=world["session"], status=Ask.Status.PENDING).first()
    if ask is None:
        outcome = services.tool_call(agent=world["agent"], session=world["session"], name="ask_user_questions",
                                     arguments={"questions": QUESTIONS})
        assert outcome.status == "pending", outcome.tool_result
        ask = outcome.ask
    return ask


async def reply(socket: WebsocketCommunicator) -> dict:
    """The next message that answers what the page sent (pushes about asks are skipped)."""
    while True:
        output = await socket.receive_output(timeout=REPLY_TIMEOUT)
        if output["type"] == "websocket.close":
            return {"closed": output.get("code")}
        message = json.loads(output["text"])
        if message.get("type") not in PUSHES:
            return message


async def session_with_frames(world, frames) -> list[str]:
    """Send every frame on one socket, then a valid answer; the problems seen."""
    socket = WebsocketCommunicator(application, "/ws/panel/", headers=[
        (b"cookie", world["cookie"].encode()), (b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")])
    connected, _ = await socket.connect(timeout=5)
    assert connected
    problems = []
    try:
        for frame in frames:
            ask = await database_sync_to_async(pending_ask)(world)
            try:
                # send_input, not send_to: a browser may send an empty frame, which send_to refuses.
                if isinstance(frame, bytes):
                    await socket.send_input({"type": "websocket.receive", "bytes": bytes(frame)})
                else:
                    await socket.send_input({"type": "websocket.receive", "text": frame.replace(ASK_ID, ask.id)})
                answer = await reply(socket)
            except Exception as exc:  # the consumer died: a server closes the socket with 1011
                return problems + [f"{frame!r}: consumer raised {type(exc).__name__}: {str(exc)[:120]}"]
            if "closed" in answer:
                return problems + [f"{frame!r}: socket closed with {answer['closed']}"]
            if answer.get("type") not in ("error", "ask_user_questions_ack", "dingtalk_form_ack"):
                problems.append(f"{frame!r}: answered {str(answer)[:120]}")
        ask = await database_sync_to_async(pending_ask)(world)
        await socket.send_json_to({"type": "ask_user_questions_result", "requestId": ask.id, "answers": answer_for()})
        try:
            answer = await reply(socket)
        except Exception as exc:
            return problems + [f"valid answer afterwards: consumer raised {type(exc).__name__}"]
        if answer != {"type": "ask_user_questions_ack", "requestId": ask.id, "ok": True}:
            problems.append(f"valid answer afterwards: {answer}")
    finally:
        try:
            await socket.disconnect()
        except (Exception, asyncio.CancelledError):
            pass
    return problems


def form_message(request_id=ASK_ID, form=None, **extra) -> Text:
    """A DingTalk form answer naming (here) a question ask: refused without a crash, nothing changes."""
    return Text(render({"type": "dingtalk_form_result", "requestId": request_id, "form": form, **extra}))


def result_message(request_id=ASK_ID, answers=None, **extra) -> Text:
    answers = answer_for() if answers is None else answers
    return Text(render({"type": "ask_user_questions_result", "requestId": request_id, "answers": answers, **extra}))


hostile_or = lambda *plain: st.sampled_from(plain) | hostile_values  # noqa: E731
answer_items = st.fixed_dictionaries({
    "question": hostile_or(QUESTIONS[0]["question"], ""),
    "selectedLabels": hostile_or(["PostgreSQL"], ["SQLite", "PostgreSQL"], [], ["Nope"]),
    "customInput": hostile_or(None, "", "other", HUGE[:2000]),
})
frames = st.one_of(
    st.text(max_size=200).map(Text),
    hostile_values.map(lambda value: Text(render(value))),
    st.builds(result_message, request_id=hostile_or(ASK_ID, "q_" + "0" * 32, ""),
              answers=st.lists(answer_items, max_size=2) | hostile_values),
    st.builds(lambda kind: Text(render({"type": kind})),
              hostile_or("ask_user_questions_result", "dingtalk_form_result", "ping", "")),
    st.builds(form_message, request_id=hostile_or(ASK_ID, ""), form=hostile_values, action=hostile_or("submit", "cancel")),
    st.binary(max_size=50).map(Bytes),
)

ATTACKS = [
    Text(deep()),
    Text(deep_object()),
    result_message(answers=Raw(deep())),
    result_message(answers=[{"question": QUESTIONS[0]["question"], "selectedLabels": [], "customInput": "a\x00b"}]),
    result_message(answers=[{"question": QUESTIONS[0]["question"], "selectedLabels": [], "customInput": "\ud800"}]),
    result_message(answers=[{"question": QUESTIONS[0]["question"], "selectedLabels": [], "customInput": HUGE}]),
    result_message(answers=[{"question": "\x00", "selectedLabels": ["\udfff"], "customInput": None}]),
    result_message(answers={"selectedLabels": "PostgreSQL"}),
    result_message(request_id=["q_x"]),
    result_message(request_id="q_\x00"),
    result_message(request_id="\ud800"),
    result_message(answers=[{"selectedLabels": [Raw("NaN")], "customInput": Raw("1e999")}]),
    form_message(form=Raw(deep())),
    form_message(form={"x": "\x00"}, action=["submit"]),
    form_message(request_id=None, form={}),
    Text('"\\ud800"'),
    Text("NaN"),
    Text(""),
    Bytes(b"\x00binary"),
]


def _attack_examples(test):
    for attack in ATTACKS:  # each on a socket of its own, so one crash hides no other
        test = example(sent=[attack])(test)
    return test


@FUZZ_SOCKET
@given(sent=st.lists(frames, min_size=1, max_size=4))
@_attack_examples
def test_panel_socket_answers_every_frame_and_still_takes_an_answer(panel_world, sent):
    problems = async_to_sync(session_with_frames)(panel_world, sent)
    assert not problems, "\n".join(problems)


def test_an_other_users_ask_id_in_a_fuzzed_frame_changes_nothing(panel_world):
    """A frame naming an ask that is not the user's is answered not_found and the ask stays open."""
    other = person("mallory")
    grant(panel_world["agent"], "mallory")
    session, _ = services.session_upsert(agent=panel_world["agent"], key="web/mallory", platform="web",
                                         web_user="mallory", user_id="mallory")
    PanelPresence.objects.create(username=other.username, channel_name="fake.mallory")
    outcome = services.tool_call(agent=panel_world["agent"], session=session, name="ask_user_questions",
                                 arguments={"questions": QUESTIONS})
    assert outcome.status == "pending"
    problems = async_to_sync(session_with_frames)(panel_world, [result_message(request_id=outcome.ask.id)])
    assert not problems
    assert Ask.objects.get(pk=outcome.ask.id).status == Ask.Status.PENDING


@pytest.mark.parametrize("frame", [{"text": ""}, {"bytes": b"\x00binary"}, {"bytes": b""}])
def test_an_empty_or_binary_frame_gets_an_error_and_the_socket_stays_usable(panel_world, frame):
    async def run():
        socket = WebsocketCommunicator(application, "/ws/panel/", headers=[
            (b"cookie", panel_world["cookie"].encode()), (b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")])
        assert (await socket.connect(timeout=5))[0]
        await socket.send_input({"type": "websocket.receive", **frame})
        first = await reply(socket)
        ask = await database_sync_to_async(pending_ask)(panel_world)
        await socket.send_json_to({"type": "ask_user_questions_result", "requestId": ask.id, "answers": answer_for()})
        second = await reply(socket)
        await socket.disconnect()
        return first, second, ask.id

    first, second, ask_id = async_to_sync(run)()
    assert first["type"] == "error" and "message" in first["error"]  # says the frame was unreadable
    assert second == {"type": "ask_user_questions_ack", "requestId": ask_id, "ok": True}
