"""A blocking call's wait: parked in the process's hub (no thread, no database connection) until
its ask ends, with progress notifications, the host's lease, and ``notifications/cancelled``.
"""
from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from contextlib import nullcontext, suppress
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import anyio
import mcp_types as types
from django.utils import timezone
from mcp.server.context import ServerRequestContext

from askcards.wake import events
from askcards import selectors, services
from askcards.api.leases import KEEPER
from askcards.db import in_pool
from askcards.models import Agent, Ask

from . import host, results
from .caller import Caller
from .context import AskHost, CALLER, CANCEL, DEADLINE_GRACE_SECONDS, PROGRESS_SECONDS


_T = TypeVar("_T")


async def despite_leaving(making: Awaitable[_T], left: Callable[[_T], Awaitable[None]]) -> _T:
    """What ``making`` makes (an ask, in the pool), finished even if the client goes away meanwhile
    (its request cancelled: the pool goes on making it anyway); then ``left`` is given it before
    the cancellation goes on, so that what was made for a waiter that is gone is let go."""
    run = asyncio.ensure_future(making)
    try:
        return await asyncio.shield(run)
    except asyncio.CancelledError:
        with anyio.CancelScope(shield=True), suppress(Exception):
            await left(await run)
        raise


# ---------------------------------------------------------------------------------------- waiting


def read_ask(agent: Agent, ask_id: str, *, returned: bool = False) -> Ask:
    """The ask with its session and respondents read (in the pool: results are built from them
    on the event loop, where the ORM may not run). ``returned``: an ended ask's result is about to
    go back to the caller, and counts as returned (``services.ask_result_returned``)."""
    ask = selectors.with_respondents(selectors.ask_get(agent=agent, ask_id=ask_id))
    if returned and not ask.is_open:
        services.ask_result_returned(ask=ask)
    return ask


def cancel_key(caller: Caller, request_id: Any) -> str:
    """The hub key of one parked ``tools/call``: its agent, session and JSON-RPC id
    (``1`` and ``"1"`` differ). Stateless HTTP has no connection identity, so two clients sharing
    a session and an in-flight request id share it too."""
    digest = hashlib.sha256(f"{caller.session.pk}|{request_id!r}".encode()).hexdigest()[:40]
    return f"mcp.{caller.agent.pk}.{digest}"


async def park(ctx: ServerRequestContext[Any, Any], caller: Caller, ask_id: str, waiter: events.Waiter,
                *, lease: bool = False, returned: bool = False, ask_host: AskHost | None = None) -> Ask:
    """Wait until the ask ends or its deadline (plus grace) passes; returns it as it is then.

    Parked in the hub (the ask's key, and the cancel key the caller may have added):
    woken by the ask's changes, it re-reads the ask in the pool; sends progress meanwhile. While
    the bus is down it re-reads every ``events.LAYER_RETRY_SECONDS`` instead (the waiter's
    ``REREAD``), as the REST long-polls do.

    A blocking ``tools/call`` (``lease``) holds the ask's lease while it waits
    (``services.waiters``). When its handler is cancelled (the client went away) the lease runs
    the grace period: a re-call with the same ``call_id`` or a task read takes it back, else the
    worker cancels the ask (``caller_gone``). Without a lease (``tasks/result``) a cancelled
    handler leaves the ask as it is: a task is read later by design.

    ``ask_host`` (handshake revisions, ``host=ask``): the open ask is also put to the host's own
    user on this request's stream once parked, and again when their response did not answer the
    form (``host.ASK_AGAIN``). Their response comes back elsewhere and wakes this call as any
    answer does; the lease is held meanwhile, so a client gone mid-form ends ``caller_gone``.

    ``returned``: the ask it returns ended, its result counts as returned (``read_ask``)."""
    with services.parked_wait(caller.agent.pk):
        try:
            with KEEPER.holding(ask_id) if lease else nullcontext():
                await waiter.add(events.ask_key(ask_id))
                # After subscribing: no change can slip by.
                state = await (_leased_state(caller.agent, ask_id, returned) if lease
                               else in_pool(_state, caller.agent, ask_id, returned=returned))
                if not isinstance(state, _Waiting):
                    return state
                if ask_host is not None:
                    await ask_host(ask_id)
                loop = asyncio.get_running_loop()
                give_up = loop.time() + max(0.0, (state.deadline - timezone.now()).total_seconds()) + DEADLINE_GRACE_SECONDS
                total = max(1.0, (state.deadline - state.created_at).total_seconds())
                next_progress = loop.time()
                while isinstance(state, _Waiting):
                    now = loop.time()
                    if now >= next_progress:
                        elapsed = (timezone.now() - state.created_at).total_seconds()
                        await ctx.session.report_progress(min(elapsed, total), total, state.message)
                        next_progress = now + PROGRESS_SECONDS
                    if now >= give_up:
                        return await in_pool(read_ask, caller.agent, ask_id)  # still open: as it is now
                    message = await waiter.receive(min(next_progress, give_up) - now)
                    if message is None:
                        continue
                    state = await in_pool(_state, caller.agent, ask_id, cancel=message.get("type") == CANCEL,
                                          returned=returned)
                    if message.get("type") == host.ASK_AGAIN and ask_host is not None and isinstance(state, _Waiting):
                        await ask_host(ask_id)
                return state
        except BaseException:
            if lease:  # once the lease is no longer refreshed by this call
                with anyio.CancelScope(shield=True):
                    await in_pool(services.caller_left, ask_id=ask_id)
            raise


@dataclass(frozen=True, slots=True)
class _Waiting:
    """What a parked call keeps of its open ask while it waits, instead of the row (with its
    session, respondents and questions): when it was made and is due, and what the progress
    notifications say (as of the last read; every wake reads the ask again)."""

    created_at: datetime
    deadline: datetime
    message: str

    @classmethod
    def of(cls, ask: Ask) -> _Waiting:
        return cls(ask.created_at, ask.deadline, results.waiting_message(ask))


def _state(agent: Agent, ask_id: str, *, lease: bool = False, cancel: bool = False,
           returned: bool = False) -> Ask | _Waiting:
    """The ask once it has ended, else what its wait keeps (``_Waiting``). ``lease``: the waiter
    takes the ask's lease first; ``cancel``: the caller's ``notifications/cancelled`` arrived,
    the ask is cancelled (``by_agent``) if still open; ``returned``: as ``read_ask``'s."""
    if lease:
        services.waiter_parked(ask_id=ask_id)
    ask = read_ask(agent, ask_id, returned=returned)
    if cancel and ask.is_open:
        services.ask_cancel(ask=ask, reason=Ask.Reason.BY_AGENT, actor=f"agent:{agent.name}")
        ask = read_ask(agent, ask_id, returned=returned)
    return _Waiting.of(ask) if ask.is_open else ask


async def _leased_state(agent: Agent, ask_id: str, returned: bool) -> Ask | _Waiting:
    """``_state`` taking the lease, finished even if the client goes away meanwhile: the lease it
    takes must be in place before park's caller_left shortens it to the grace period, not land
    after it."""
    read = asyncio.ensure_future(in_pool(_state, agent, ask_id, lease=True, returned=returned))
    try:
        return await asyncio.shield(read)
    except asyncio.CancelledError:
        with suppress(Exception):
            await read
        raise


async def cancelled(ctx: ServerRequestContext[Any, Any], params: types.CancelledNotificationParams) -> None:
    """``notifications/cancelled``: tell the parked call (on whichever process holds it) to cancel
    its ask. Stateless HTTP brings this notification in its own POST, often to another process."""
    caller = CALLER.get(None)
    if caller is None or params.request_id is None:
        return
    # With the bus down (Redis stopped), a cancel for a call parked on another process is lost
    # (logged once per outage): the call's ask
    # then ends as it would have (answer, deadline), and the notification itself never errors.
    events.publish([(cancel_key(caller, params.request_id), {"type": CANCEL})])
