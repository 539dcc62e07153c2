"""A GET never writes (issue 12): reading asks or events changes no row, including the reads that
used to take delivery (``/events?after=N``, a terminal ask read or waited on). Taking delivery is
a POST: ``/asks/{id}/wait`` and ``/events/ack``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.apps import apps

from askcards import services
from askcards.models import Ask, OutboxEvent
from tests.conftest import answer_for
from tests.security.edge_client import call

from .conftest import GET_ENDPOINTS, endpoint_id, fill, send


def snapshot() -> dict[str, list[dict[str, Any]]]:
    """Every row of every askcards model, every field."""
    return {
        model.__name__: list(model.objects.order_by("pk").values())
        for model in apps.get_app_config("askcards").get_models()
    }


def get_requests(name: str, world: dict[str, Any], collection: Ask) -> list[tuple[dict[str, str], dict[str, str]]]:
    """(path ids, query) of the requests to make of each GET endpoint: every kind of object it
    shows, with the parameters that used to write. A new GET endpoint needs its entry here."""
    sessions = [world["session"], world["feishu_session"], world["subagent"], collection.session]
    asks = [world["pending"], world["answered"], world["cancelled"], collection]
    last = str(world["last_seq"] + 1)  # and the collection's ask.progress
    waits = [({"ask_id": ask.id}, {"timeout": "0"}) for ask in asks] + [({"ask_id": asks[0].id}, {"timeout": "1"})]
    feeds = [({}, {}), ({}, {"after": last}), ({}, {"after": "1", "limit": "1"}), ({}, {"after": last, "wait": "1"})]
    return {
        "session-detail": [({"session_id": session.id}, {}) for session in sessions],
        "session-tools": [({"session_id": session.id}, {}) for session in sessions],
        "ask-list": [({}, {}), ({}, {"session": world["session"].key, "status": "answered"})],
        "ask-detail": [({"ask_id": ask.id}, {}) for ask in asks],
        "ask-wait": waits,
        "events": feeds,
    }[name]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("endpoint", GET_ENDPOINTS, ids=endpoint_id)
def test_get_endpoint_changes_no_row(api, world, dingtalk_collection, endpoint):
    _, route, name = endpoint
    requests = get_requests(name, world, dingtalk_collection)
    before = snapshot()
    for ids, query in requests:
        response = send(api, "GET", fill(route, **ids), query=query)
        assert response.status_code == 200, response.content[:300]
    assert snapshot() == before


# ------------------------------------------------------------------------------ long-polls (real ASGI app)


async def _request(method: str, path: str, key: str, body: Any = None):
    raw = json.dumps(body).encode() if body is not None else b""
    headers = [("authorization", f"Bearer {key}")]
    if body is not None:
        headers += [("content-type", "application/json"), ("content-length", str(len(raw)))]
    return await call(method, path, headers=headers, body=raw, timeout=25)


async def _answer_soon(ask_id: str) -> None:
    await asyncio.sleep(0.3)
    await database_sync_to_async(services.ask_answer)(ask_id=ask_id, answers=answer_for(), surface="web")


def _delivery(ask_id: str) -> tuple[bool, str]:
    event = OutboxEvent.objects.get(ask_id=ask_id)
    return Ask.objects.get(pk=ask_id).result_delivered_at is not None, event.delivered_via


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_long_poll_get_woken_by_the_answer_leaves_it_undelivered(agent_and_key, pending_ask):
    answering = asyncio.ensure_future(_answer_soon(pending_ask.id))
    response = await _request("GET", f"/api/v1/asks/{pending_ask.id}/wait?timeout=20", agent_and_key[1])
    await answering
    assert (response.status, response.json()["status"]) == (200, "answered")
    assert await database_sync_to_async(_delivery)(pending_ask.id) == (False, "")


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_long_poll_post_woken_by_the_answer_takes_delivery(agent_and_key, pending_ask):
    answering = asyncio.ensure_future(_answer_soon(pending_ask.id))
    response = await _request("POST", f"/api/v1/asks/{pending_ask.id}/wait", agent_and_key[1], {"timeout": 20})
    await answering
    assert (response.status, response.json()["status"]) == (200, "answered")
    assert await database_sync_to_async(_delivery)(pending_ask.id) == (True, "response")
