"""A person with many waiting asks: the panel socket sends a page of them (the oldest) and a count
of the rest, lets the next one in as one on the page ends, and a reconnect does not send again what
the page still shows."""
import json

import pytest
from channels.db import database_sync_to_async

from askcards import services
from askcards.models import Ask
from askcards.surfaces import web
from tests.conftest import QUESTIONS, answer_for, person
from tests.consumers.test_panel import _panel

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

PAGE = 20  # the default ASKCARDS_PANEL_PAGE


@pytest.fixture
def web_surface(settings, recording_surface):
    settings.ASKCARDS_SURFACES = ["askcards.surfaces.web.WebSurface"]


@pytest.fixture
def alice(db):
    return person("alice", "pw-alice-123")


@database_sync_to_async
def _asks(agent, session, count, questions=QUESTIONS):
    """``count`` asks, oldest first (alice's panel must be present for them to be pending)."""
    asks = []
    for _ in range(count):
        outcome = services.tool_call(agent=agent, session=session, name="ask_user_questions",
                                     arguments={"questions": questions})
        assert outcome.status == "pending"
        asks.append(outcome.ask.id)
    return asks


@database_sync_to_async
def _cancel(ask_id):
    assert services.ask_cancel(ask=Ask.objects.get(pk=ask_id), actor="agent:a")


async def _drain(panel, timeout=0.5):
    """Every message until the socket is quiet, with the bytes they took."""
    messages, size = [], 0
    while not await panel.receive_nothing(timeout=timeout):
        output = await panel.receive_output(timeout=5)
        size += len(output["text"].encode())
        messages.append(json.loads(output["text"]))
    return messages, size


def _opened(messages):
    return [m["requestId"] for m in messages if m["type"] == "ask_user_questions"]


def _counts(messages):
    return [m["count"] for m in messages if m["type"] == "pending_more"]


async def test_connect_sends_the_oldest_page_and_counts_the_rest(web_surface, agent, web_session, alice):
    keeper = await _panel(alice)  # present while the asks are made
    asks = await _asks(agent, web_session, PAGE + 25)
    await _drain(keeper)

    panel = await _panel(alice)
    messages, _ = await _drain(panel)

    assert _opened(messages) == asks[:PAGE]
    assert _counts(messages) == [25]
    await panel.disconnect()
    await keeper.disconnect()


async def test_full_page_counts_a_new_ask_and_shows_the_next_one_when_one_is_answered(web_surface, agent, web_session, alice):
    panel = await _panel(alice)
    asks = await _asks(agent, web_session, PAGE + 2)
    messages, _ = await _drain(panel)
    assert _opened(messages) == asks[:PAGE]  # live pushes beyond the page are counted, not shown
    assert _counts(messages) == [1, 2]

    await panel.send_json_to({"type": "ask_user_questions_result", "requestId": asks[0], "answers": answer_for()})
    messages, _ = await _drain(panel)

    assert {"type": "ask_user_questions_ack", "requestId": asks[0], "ok": True} in messages
    assert _opened(messages) == [asks[PAGE]]  # the oldest of the rest takes its place
    assert _counts(messages) == [1]
    await panel.disconnect()


async def test_an_ask_ending_beyond_the_page_only_lowers_the_count(web_surface, agent, web_session, alice):
    panel = await _panel(alice)
    asks = await _asks(agent, web_session, PAGE + 3)
    await _drain(panel)

    await _cancel(asks[PAGE + 1])
    messages, _ = await _drain(panel)

    assert _opened(messages) == []
    assert not [m for m in messages if m["type"] == "ask_user_questions_cancelled"]
    assert _counts(messages) == [2]
    # Two asks on the page end: the two still waiting beyond it come in, oldest first.
    for ask_id in asks[:2]:
        await _cancel(ask_id)
    messages, _ = await _drain(panel)
    assert _opened(messages) == [asks[PAGE], asks[PAGE + 2]]
    assert _counts(messages)[-1] == 0
    await panel.disconnect()


async def test_reconnect_does_not_resend_what_the_page_still_shows(web_surface, agent, web_session, alice):
    big = [{**QUESTIONS[0], "question": "长" * 2000}]  # about 6 KB an ask
    panel = await _panel(alice)
    asks = await _asks(agent, web_session, PAGE + 25, questions=big)
    _, first = await _drain(panel)
    await panel.disconnect()
    await _cancel(asks[3])

    again = await _panel(alice, "/ws/panel/?known=" + ",".join(asks[:PAGE]))
    messages, size = await _drain(again)

    # Told only what changed: the ask that ended, one ask to fill its place, the count.
    assert _opened(messages) == [asks[PAGE]]
    assert ("ask_user_questions_cancelled", asks[3]) in [(m["type"], m.get("requestId")) for m in messages]
    assert _counts(messages) == [24]
    assert size < first / 10
    await again.disconnect()


async def test_a_connect_sends_a_bounded_number_of_bytes(web_surface, agent, web_session, alice):
    # The largest ask the tool takes: four questions of 2,000 characters, each with four options of
    # 1,000-character descriptions — about 72 KB of CJK.
    options = [{"label": f"选项{n}", "description": "述" * 1000} for n in range(4)]
    huge = [{"question": "长" * 2000, "header": f"问题{n}", "options": options} for n in range(4)]
    keeper = await _panel(alice)
    asks = await _asks(agent, web_session, 10, questions=huge)
    await _drain(keeper)

    panel = await _panel(alice)
    messages, size = await _drain(panel)

    shown = _opened(messages)
    assert shown == asks[:len(shown)] and 1 <= len(shown) < 10
    assert _counts(messages) == [10 - len(shown)]
    assert size <= web.PANEL_PAGE_BYTES + 80_000  # the page's bound and one ask over it at most
    await panel.disconnect()
    await keeper.disconnect()
