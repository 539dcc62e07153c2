"""OpenTelemetry: the MCP SDK's span around every message is made while a tracer provider is
configured (askcards/mcp/tracing.py), and not at all without one. Through the real ASGI app."""
from __future__ import annotations

import contextlib

import pytest
from mcp.shared import _otel
from opentelemetry import trace

from tests.security import mcp_wire as wire

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

# A call answered at once (its questions are invalid): a tool error, no waiting.
IMMEDIATE = {"name": "ask_user_questions", "arguments": {"questions": []}}


class RecordingTracer(trace.NoOpTracer):
    def __init__(self, spans: list[str]):
        self.spans = spans

    @contextlib.contextmanager
    def start_as_current_span(self, name, *args, **kwargs):
        self.spans.append(name)
        yield trace.INVALID_SPAN


class RecordingProvider(trace.TracerProvider):
    def __init__(self):
        self.spans: list[str] = []

    def get_tracer(self, *args, **kwargs):
        return RecordingTracer(self.spans)


@pytest.mark.parametrize("era", [wire.LEGACY, wire.MODERN])
async def test_with_a_tracer_provider_every_message_gets_the_sdks_span(era, agent_and_key, present_session,
                                                                       monkeypatch):
    provider = RecordingProvider()
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)  # as set_tracer_provider sets it (once a process)
    monkeypatch.setattr(_otel._tracer, "_real_tracer", None)  # the SDK's proxy tracer finds it, and forgets it after
    answer = await wire.rpc(agent_and_key[1], "tools/call", IMMEDIATE, era=era)
    assert answer.result["isError"] is True
    await wire.rpc(agent_and_key[1], "tools/list", era=era, id=2)
    assert provider.spans == ["tools/call ask_user_questions", "tools/list"]


@pytest.mark.parametrize("era", [wire.LEGACY, wire.MODERN])
async def test_without_one_the_sdks_tracing_middleware_does_not_run(era, agent_and_key, present_session, monkeypatch):
    spans: list[str] = []
    monkeypatch.setattr(_otel, "_tracer", RecordingTracer(spans))  # would record if the middleware ran
    answer = await wire.rpc(agent_and_key[1], "tools/call", IMMEDIATE, era=era)
    assert answer.result["isError"] is True
    await wire.rpc(agent_and_key[1], "tools/list", era=era, id=2)
    assert spans == []
