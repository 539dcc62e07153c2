"""A person with hundreds of pending asks (400 here, from one agent lifted past its quotas): the panel
socket sends a page of them and a count of the rest, and a reconnect that says what its page still
shows (``?known=``) is sent only what changed — not hundreds of asks again. Measured in the bytes the
real consumer sends through the whole ASGI stack, the history message included."""
import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.test import Client

from askcards import services
from askcards.models import Ask
from askcards.surfaces import web
from project.asgi import application
from tests.conftest import person

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

WAITING = 400
PAGE = 20  # the default ASKCARDS_PANEL_PAGE
# About 1.6 KB an ask on the wire (CJK is 3 bytes a character): all 400 would be over 600 KB.
QUESTIONS = [{"question": "是否批准这次发布？" + "说明" * 250, "header": "发布",
              "options": [{"label": "批准", "description": "继续"}, {"label": "拒绝", "description": "停止"}]}]


@pytest.fixture
def web_surface(settings, recording_surface):
    settings.ASKCARDS_SURFACES = ["askcards.surfaces.web.WebSurface"]


async def _connect(user, path="/ws/panel/"):
    client = Client()
    await database_sync_to_async(client.force_login)(user)
    cookie = f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}"
    socket = WebsocketCommunicator(application, path, headers=[
        (b"cookie", cookie.encode()), (b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")])
    connected, _ = await socket.connect(timeout=5)
    assert connected
    return socket


async def _received(socket, quiet=0.5):
    """Every message the socket was sent until it is quiet, and their bytes on the wire (UTF-8).
    The first is waited for longer: on a loaded machine a page of hundreds of asks takes its time."""
    messages, size = [], 0
    for n in range(2 * WAITING + 100):  # bounded: never more than one message per ask, and a few
        if await socket.receive_nothing(timeout=quiet if n else 10 * quiet):
            break
        text = (await socket.receive_output(timeout=5))["text"]
        size += len(text.encode())
        messages.append(json.loads(text))
    return messages, size


def _shown(messages):
    return [m["requestId"] for m in messages if m["type"] == "ask_user_questions"]


def _counts(messages):
    return [m["count"] for m in messages if m["type"] == "pending_more"]


@database_sync_to_async
def _ask_many(agent, session, count):
    services.agent_quotas_set(agent=agent, actor="test", pending_per_respondent=0, asks_per_minute=0)
    made = []
    for _ in range(count):
        outcome = services.tool_call(agent=agent, session=session, name="ask_user_questions",
                                     arguments={"questions": QUESTIONS})
        assert outcome.status == "pending", outcome.tool_result
        made.append(outcome.ask.id)
    return made


@database_sync_to_async
def _wire_sizes(ask_ids):
    """What sending each of these asks to the panel takes, in bytes."""
    return [len(json.dumps(web.ask_message(ask), ensure_ascii=False).encode())
            for ask in Ask.objects.filter(pk__in=ask_ids).select_related("session", "agent")]


@database_sync_to_async
def _cancel(ask_id):
    assert services.ask_cancel(ask=Ask.objects.get(pk=ask_id), actor="agent:test")


async def test_hundreds_of_pending_asks_send_a_page_and_a_reconnect_sends_only_what_changed(
        web_surface, agent, web_session):
    alice = await database_sync_to_async(person)("alice", "pw-alice-123")
    keeper = await _connect(alice)  # the panel is open while they are asked, so they are pending
    asks = await _ask_many(agent, web_session, WAITING)
    await _received(keeper)
    sizes = await _wire_sizes(asks)
    everything = sum(sizes)
    assert everything > 600_000

    panel = await _connect(alice)
    messages, connect_bytes = await _received(panel)
    await panel.disconnect()

    assert [m["type"] for m in messages][0] == "history"
    assert _shown(messages) == asks[:PAGE]  # the oldest page
    assert _counts(messages) == [WAITING - PAGE]  # and how many more wait
    assert connect_bytes <= PAGE * max(sizes) + 1000, connect_bytes  # the page, and a few small messages
    assert connect_bytes < everything / 15

    # Away, one ask on the page ends; the reconnect names the page it still shows.
    await _cancel(asks[5])
    again = await _connect(alice, "/ws/panel/?known=" + ",".join(asks[:PAGE]))
    messages, reconnect_bytes = await _received(again)

    assert _shown(messages) == [asks[PAGE]]  # only the one that takes the ended ask's place
    assert [m["requestId"] for m in messages if m["type"] == "ask_user_questions_cancelled"] == [asks[5]]
    assert _counts(messages) == [WAITING - PAGE - 1]
    assert reconnect_bytes <= max(sizes) + 1000, reconnect_bytes

    # Nothing changed since: a reconnect is a few hundred bytes, however many wait.
    await again.disconnect()
    page = asks[:5] + asks[6:PAGE + 1]
    quiet = await _connect(alice, "/ws/panel/?known=" + ",".join(page))
    messages, quiet_bytes = await _received(quiet)
    assert _shown(messages) == [] and _counts(messages) == [WAITING - PAGE - 1]
    assert quiet_bytes < 1000, (quiet_bytes, messages)
    await quiet.disconnect()
    await keeper.disconnect()
