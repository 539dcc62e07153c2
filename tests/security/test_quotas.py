"""Per-agent quotas (services.quotas): one key cannot flood a person, the database or a server.

Each quota, over its limit: HTTP 429 ``quota_exceeded`` in the API's error shape with
``Retry-After``, counted on ``/metrics``, and nothing written; over MCP, a tool error (or, for
``tasks/result``, a JSON-RPC error) with the same text. The agent's own limits (admin, the
``askcards_agent quotas`` command) override the defaults; 0 is no limit.
"""
from __future__ import annotations

import asyncio
import io
import json
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.core.management import call_command
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from askcards.operators import metrics
from askcards import services
from askcards.models import Agent, AgentRateBucket, Ask
from askcards.services import quotas
from tests.api.conftest import db_state, error_of, send
from tests.conftest import QUESTIONS, grant
from tests.security import mcp_wire as wire
from tests.security.edge_client import call
from tests.surfaces import RecordingSurface

CALL = {"name": "ask_user_questions", "arguments": {"questions": QUESTIONS}}


def set_quotas(agent: Agent, **limits: int | None) -> None:
    services.agent_quotas_set(agent=agent, actor="test", **limits)


def client_for(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def ask(client: APIClient, session_id: str, **extra):
    return send(client, "POST", "/api/v1/tools/call", {"session": session_id, **CALL, **extra})


def refusals(quota: str) -> float:
    return metrics.QUOTA_REFUSALS.labels(quota)._value.get()


def assert_refused(response, quota: str, words: str) -> None:
    code, message = error_of(response, 429)
    assert code == "quota_exceeded"
    assert words in message and "admin page" in message, message
    assert int(response["Retry-After"]) >= 1


def mcp_refusal(key: str) -> dict:
    """An MCP tools/call over a quota: the tool error's JSON (the model reads it)."""
    answer = asyncio.run(wire.rpc(key, "tools/call", CALL))
    assert answer.error is None and answer.result["isError"] is True, answer.final
    return json.loads(answer.result["content"][0]["text"])


METRICS_TOKEN = "metrics-token-for-quota-tests-0123"


def scraped_refusals(quota: str) -> float:
    """``askcards_quota_refusals_total{quota}`` as ``GET /metrics`` serves it to a scraper."""
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}")
    assert response.status_code == 200, response.content[:300]
    return sum(
        sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
        if sample.name == "askcards_quota_refusals_total" and sample.labels == {"quota": quota}
    )


@pytest.fixture
def rest(agent_and_key, present_session):
    return client_for(agent_and_key[1])


# --------------------------------------------------------------------------------- pending asks


@pytest.mark.django_db(transaction=True)
def test_pending_asks_in_all_are_capped_and_a_refusal_writes_nothing(agent_and_key, present_session, rest):
    agent, key = agent_and_key
    set_quotas(agent, pending_asks=3)
    made = [ask(rest, present_session.id).json()["ask"]["id"] for _ in range(3)]
    before, counted = db_state(), refusals("pending_asks")
    assert_refused(ask(rest, present_session.id), "pending_asks", "already has 3 open asks")
    assert db_state() == before
    assert refusals("pending_asks") == counted + 1

    # MCP: the same refusal as a tool error the model reads, still nothing written.
    answer = asyncio.run(wire.rpc(key, "tools/call", CALL))
    assert answer.result["isError"] is True, answer.result
    text = json.loads(answer.result["content"][0]["text"])
    assert text["reason"] == "quota_exceeded" and "already has 3 open asks" in text["error"]
    assert db_state() == before

    # An ask that ends frees its place.
    services.ask_cancel(ask=Ask.objects.get(pk=made[0]), actor="agent:test")
    assert ask(rest, present_session.id).status_code == 200


@pytest.mark.django_db
def test_pending_asks_per_person_protect_each_person_not_the_agent(agent, other_agent, rest, present_session):
    grant(agent, "bob")
    bobs, _ = services.session_upsert(agent=agent, key="web/bob", platform="web", web_user="bob", user_id="bob")
    RecordingSurface.present.add(bobs.id)
    set_quotas(agent, pending_per_respondent=2)
    for _ in range(2):
        assert ask(rest, present_session.id).json()["status"] == "pending"
    assert_refused(ask(rest, present_session.id), "pending_per_respondent", "open asks for 'alice'")
    assert ask(rest, bobs.id).json()["status"] == "pending"  # another person still gets asked


@pytest.mark.django_db(transaction=True)
def test_over_mcp_the_per_person_refusal_is_the_apis_message(agent_and_key, present_session, rest):
    agent, key = agent_and_key
    set_quotas(agent, pending_per_respondent=2, pending_asks=0)
    for _ in range(2):
        assert ask(rest, present_session.id).json()["status"] == "pending"
    before = db_state()
    refused = ask(rest, present_session.id)
    assert_refused(refused, "pending_per_respondent", "open asks for 'alice'")
    text = mcp_refusal(key)
    assert text == {"error": error_of(refused)[1], "reason": "quota_exceeded",
                    "retry_after": int(refused["Retry-After"])}
    assert db_state() == before


@pytest.mark.django_db
def test_a_refusal_counts_on_the_metrics_a_scraper_reads(agent, rest, present_session, settings):
    settings.ASKCARDS_METRICS_TOKEN, settings.ASKCARDS_METRICS_ALLOW = METRICS_TOKEN, ()
    set_quotas(agent, pending_per_respondent=1)
    assert ask(rest, present_session.id).status_code == 200
    counted = {quota: scraped_refusals(quota) for quota in ("pending_per_respondent", "pending_asks")}
    assert_refused(ask(rest, present_session.id), "pending_per_respondent", "open asks for 'alice'")
    assert scraped_refusals("pending_per_respondent") == counted["pending_per_respondent"] + 1
    assert scraped_refusals("pending_asks") == counted["pending_asks"]  # counted under its own quota only


@pytest.mark.django_db
def test_an_agents_own_limit_overrides_the_default_and_zero_is_no_limit(agent, rest, present_session, settings):
    settings.ASKCARDS_QUOTA_PENDING_ASKS = 1
    assert ask(rest, present_session.id).status_code == 200
    assert_refused(ask(rest, present_session.id), "pending_asks", "already has 1 open asks")
    set_quotas(agent, pending_asks=0)
    assert ask(rest, present_session.id).status_code == 200
    set_quotas(agent, pending_asks=None)  # back to the default
    assert ask(rest, present_session.id).status_code == 429


# ---------------------------------------------------------------------------------------- rate


@pytest.mark.django_db
def test_creation_rate_is_a_token_bucket_with_retry_after(agent, rest, present_session):
    set_quotas(agent, asks_per_minute=60, ask_burst=2, pending_asks=0, pending_per_respondent=0)
    assert [ask(rest, present_session.id).status_code for _ in range(2)] == [200, 200]
    before = db_state()
    refused = ask(rest, present_session.id)
    assert_refused(refused, "asks_per_minute", "quota of 60 asks a minute")
    assert int(refused["Retry-After"]) <= 2  # one token a second
    assert db_state() == before
    # A second later the bucket holds one more token (the clock moved back instead of waiting).
    AgentRateBucket.objects.filter(agent=agent).update(
        updated_at=AgentRateBucket.objects.get(agent=agent).updated_at - timedelta(seconds=1.1))
    assert ask(rest, present_session.id).status_code == 200
    assert ask(rest, present_session.id).status_code == 429


@pytest.mark.django_db(transaction=True)
def test_over_mcp_the_creation_rate_refusal_is_the_apis_message(agent_and_key, present_session, rest):
    agent, key = agent_and_key
    # One token a minute: the bucket stays empty for the whole test, whichever way it asks.
    set_quotas(agent, asks_per_minute=1, ask_burst=2, pending_asks=0, pending_per_respondent=0)
    assert [ask(rest, present_session.id).status_code for _ in range(2)] == [200, 200]
    before = db_state()
    refused = ask(rest, present_session.id)
    assert_refused(refused, "asks_per_minute", "quota of 1 asks a minute (bursts of 2)")
    text = mcp_refusal(key)
    assert text["error"] == error_of(refused)[1] and text["reason"] == "quota_exceeded"
    assert 1 <= text["retry_after"] <= 60
    assert db_state() == before


@pytest.mark.django_db
def test_a_refused_call_takes_no_token(agent, rest, present_session):
    set_quotas(agent, asks_per_minute=60, ask_burst=1, pending_asks=1)
    assert ask(rest, present_session.id).status_code == 200
    tokens = AgentRateBucket.objects.get(agent=agent).tokens
    assert ask(rest, present_session.id).status_code == 429  # pending_asks: checked first
    assert AgentRateBucket.objects.get(agent=agent).tokens == tokens


# --------------------------------------------------------------------------------- parked waits


def _wait(key: str, path: str, timeout: float = 15):
    return call("GET", path, headers=[("authorization", f"Bearer {key}")], timeout=timeout)


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_parked_waits_are_capped_per_process_and_free_again_when_they_end(agent_and_key, present_session):
    agent, key = agent_and_key
    await database_sync_to_async(set_quotas)(agent, parked_waits=2)
    pending = await database_sync_to_async(services.tool_call)(
        agent=agent, session=present_session, name="ask_user_questions", arguments={"questions": QUESTIONS})
    path = f"/api/v1/asks/{pending.ask.id}/wait?timeout=3"
    first = asyncio.ensure_future(_wait(key, path))
    second = asyncio.ensure_future(_wait(key, "/api/v1/events?after=0&wait=3"))
    for _ in range(100):  # bounded: until both are parked
        if quotas.parked_count(agent.pk) == 2:
            break
        await asyncio.sleep(0.05)
    assert quotas.parked_count(agent.pk) == 2
    before = await database_sync_to_async(db_state)()
    for refused_path in (path, "/api/v1/events?after=0&wait=3"):
        refused = await _wait(key, refused_path)
        assert refused.status == 429 and refused.json()["error"]["code"] == "quota_exceeded", refused.body
        assert "parked waits" in refused.json()["error"]["message"] and refused.headers["retry-after"] == "10"
    body = json.dumps({"session": present_session.id, **CALL, "wait": 5}).encode()
    refused = await call("POST", "/api/v1/tools/call", body=body, headers=[
        ("authorization", f"Bearer {key}"), ("content-type", "application/json"), ("content-length", str(len(body)))])
    assert refused.status == 429
    assert await database_sync_to_async(db_state)() == before  # the refused tools/call made no ask

    # MCP: a blocking call is a tool error, tasks/result a JSON-RPC error, with the same words.
    answer = await wire.rpc(key, "tools/call", CALL)
    assert answer.result["isError"] is True and "parked waits" in answer.result["content"][0]["text"]
    answer = await wire.rpc(key, "tasks/result", {"taskId": pending.ask.id})
    assert answer.error["code"] == -32000 and "parked waits" in answer.error["message"]

    assert [(await first).status, (await second).status] == [200, 200]  # the parked ones ended normally
    assert quotas.parked_count(agent.pk) == 0
    assert (await _wait(key, f"/api/v1/asks/{pending.ask.id}/wait?timeout=0")).status == 200


# ------------------------------------------------------------------------------ set by operators


@pytest.mark.django_db
def test_the_quotas_command_shows_and_sets_an_agents_limits(agent, settings):
    out = io.StringIO()
    call_command("askcards_agent", "quotas", agent.name, "--pending-asks", "7", "--ask-burst", "0", stdout=out)
    lines = dict(line.split("\t") for line in out.getvalue().splitlines())
    assert lines["pending-asks"] == "7" and lines["ask-burst"] == "no limit"
    assert lines["parked-waits"] == f"{settings.ASKCARDS_QUOTA_PARKED_WAITS} (default)"
    call_command("askcards_agent", "quotas", agent.name, "--pending-asks", "default", stdout=io.StringIO())
    assert Agent.objects.get(pk=agent.pk).quota_pending_asks is None


@pytest.mark.django_db
def test_the_admin_sets_quotas_on_the_agents_page(agent, admin_client):
    page = admin_client.get(f"/admin/askcards/agent/{agent.pk}/change/")
    assert "Quotas" in page.content.decode() and "Default: 1000" in page.content.decode()
    admin_client.post(f"/admin/askcards/agent/{agent.pk}/change/", {
        "name": agent.name, "webhook_url": "", "is_active": "on", "web_users": [], "bots": [],
        "quota_pending_asks": "5", "quota_pending_per_respondent": "", "quota_parked_waits": "0",
        "quota_asks_per_minute": "", "quota_ask_burst": "",
    })
    saved = Agent.objects.get(pk=agent.pk)
    assert (saved.quota_pending_asks, saved.quota_parked_waits, saved.quota_asks_per_minute) == (5, 0, None)
