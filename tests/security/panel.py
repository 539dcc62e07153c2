"""A logged-in panel socket (alice's) with one pending ask already pushed to it."""
from __future__ import annotations

from channels.db import database_sync_to_async

from askcards import services
from tests.conftest import QUESTIONS, person
from tests.consumers.test_panel import _panel


async def panel_with_ask(settings, agent, web_session):
    """(socket, ask): the web surface alone, alice's socket connected and the ask's push read."""
    settings.ASKCARDS_SURFACES = ["askcards.surfaces.web.WebSurface"]
    panel = await _panel(await database_sync_to_async(person)("alice"))
    ask = (await database_sync_to_async(services.tool_call)(
        agent=agent, session=web_session, name="ask_user_questions", arguments={"questions": QUESTIONS})).ask
    pushed = await panel.receive_json_from(timeout=5)
    assert pushed["requestId"] == ask.id
    return panel, ask
