"""The MCP SDK's OpenTelemetry middleware, run only while a tracer provider is configured.

The SDK puts ``OpenTelemetryMiddleware`` first on every server: a SERVER span around each
inbound message, which records nothing until a tracer provider (an OpenTelemetry SDK, an
exporter) is installed in the process. Its span, the tracers' context managers and their frames
live as long as the message is served, which for a parked ``tools/call`` is until its ask ends:
memory held by every parked call, tracing nothing. So the middleware runs when a provider is
configured (``opentelemetry.trace.set_tracer_provider``, or ``OTEL_PYTHON_TRACER_PROVIDER``),
looked up per message, and is skipped otherwise.
"""
from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, cast

from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from opentelemetry import trace

UNTRACED = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)  # what is there without a provider


def tracing() -> bool:
    return not isinstance(trace.get_tracer_provider(), UNTRACED)


def when_traced(middleware: ServerMiddleware[Any]) -> ServerMiddleware[Any]:
    """``middleware`` itself, or for the SDK's OpenTelemetry middleware one that runs it only
    while tracing. A plain function handing back the awaitable it picked: no frame of its own in
    the chain of a parked call."""
    if not isinstance(middleware, OpenTelemetryMiddleware):
        return middleware
    otel = middleware

    def when_tracing(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Coroutine[Any, Any, HandlerResult]:
        if tracing():
            return otel(ctx, call_next)
        return cast(Coroutine[Any, Any, HandlerResult], call_next(ctx))

    return when_tracing
