"""The scale-out bus: Redis pub/sub, one subscriber connection per process (``REDIS_URL``).

Each key with a member in this process (``askcards.wake.hub``) is one Redis channel,
``askcards:<db>:<key>`` (the database number of ``REDIS_URL`` keeps deployments sharing a Redis
apart, as pub/sub itself ignores it), and the process's one connection subscribes to exactly
those: an answer is published once and Redis hands it to the processes that wait on it, none
other. Why not the others:

- channels_redis (the former channel layer) gave every waiter a channel, a group membership per
  key in Redis and a receive loop, and queued every process's messages in one sorted set: the
  per-connection memory, the wake tail and the cross-process CPU of tests/bench were spent there;
- one shared channel that every process filters is simpler but sends every message to every
  process, and leaves nothing in Redis to see who waits (``PUBSUB NUMSUB`` does here);
- PostgreSQL ``LISTEN/NOTIFY`` would hold a database connection per process outside the pool, and
  its notifications serialise on a global lock at commit.

Joining a key waits for Redis to confirm the subscription, so a waiter that re-reads after
joining cannot miss an answer committed after that read. A publish is queued to one task that
pipelines what accumulated (ordered, one round trip per batch); from code with no event loop (the
standalone worker, management commands) it is sent before returning.

A connection lost (Redis stopped, restarted, the client killed) or silent past two health pings
is the outage: ONE warning, every waiter re-reads at once and then every ``LAYER_RETRY_SECONDS``;
the process connects again each second, subscribes to every key it has, and once Redis has
confirmed that, every waiter re-reads once more. What was published meanwhile is lost, and those
re-reads are what make up for it.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
from collections import deque
from typing import Any, Callable
from urllib.parse import urlparse

import redis
import redis.asyncio
from redis.asyncio.connection import ConnectionPool
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.retry import Retry as SyncRetry

from askcards.wake.common import LAYER_RETRY_SECONDS, REREAD, Registry, running_loop

logger = logging.getLogger(__name__)

HEALTH_SECONDS = 5.0  # a silent connection is pinged after this; lost when a second silence follows
CONFIRM_SECONDS = 2.0  # at most this long a join waits for Redis to confirm its subscription
SUBSCRIBE_CHUNK = 500  # keys per SUBSCRIBE when (re)subscribing to all of them
PUBLISH_BATCH = 500  # publishes per pipeline
CONNECT_TIMEOUT = SOCKET_TIMEOUT = 1.0  # seconds, as the cache's (settings.REDIS_CACHE_OPTIONS)
# A publish is tried again once on a new connection: after Redis restarted, the first publish
# meets the pool's dead connection, and that wake must not be lost for it.
PUBLISH_RETRY = Retry(NoBackoff(), 1)


def channel_prefix(url: str) -> str:
    path = urlparse(url).path.strip("/")
    return f"askcards:{path if path.isdigit() else '0'}:"


class RedisBus:
    def __init__(self, hub: Registry, url: str):
        self.hub, self.url = hub, url
        self.prefix = channel_prefix(url)
        self.control = self.prefix + "process." + hub.origin  # keeps the connection subscribed with no key
        self.up = False
        self._outage = False  # warned of the current outage
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._commands: asyncio.Queue[tuple[Any, ...]] | None = None  # the live connection's, None while down
        self._confirm: dict[str, deque[asyncio.Future[None]]] = {}
        self._pongs: deque[Callable[[], None] | None] = deque()
        self._publishes: asyncio.Queue[list[tuple[str, bytes]]] | None = None
        self._settled: asyncio.Event | None = None  # the first connection is up, or failed
        self._late = False  # a member joined before the bus was up and did not wait for it
        self._sync_client: redis.Redis | None = None

    def channel(self, key: str) -> str:
        return self.prefix + key

    def _encode(self, messages: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, bytes]]:
        return [(self.channel(key), json.dumps({"o": self.hub.origin, "k": key, "m": message},
                                                ensure_ascii=False).encode()) for key, message in messages]

    # ------------------------------------------------------------------------------ running

    def _ensure_running(self) -> asyncio.AbstractEventLoop:
        """The bus's tasks on the running loop. A server has one loop; a test's loop that has
        ended leaves tasks that are gone, and the bus starts afresh on the next."""
        loop = asyncio.get_running_loop()
        if self._loop is loop and all(not task.done() for task in self._tasks):
            return loop
        self.close()
        self._loop = loop
        self._confirm, self._pongs = {}, deque()
        self._publishes, self._settled = asyncio.Queue(), asyncio.Event()
        self._tasks = [loop.create_task(self._subscriber(), name="askcards-bus-subscriber"),
                       loop.create_task(self._publisher(self._publishes), name="askcards-bus-publisher")]
        return loop

    def close(self) -> None:
        """Stop the bus's tasks (their connections close with them)."""
        for task in self._tasks:
            loop = task.get_loop()
            if not task.done() and not loop.is_closed():
                loop.call_soon_threadsafe(task.cancel)
        self._tasks, self._loop, self.up, self._commands = [], None, False, None

    def _outage_noticed(self, what: str, exc: BaseException) -> None:
        if self._outage:
            logger.debug("%s: Redis still unreachable (%s)", what, type(exc).__name__)
            return
        self._outage = True  # once per outage: one line a second per waiter would flood the log
        logger.warning("%s: Redis unreachable (%s: %s); wakes across processes are lost meanwhile and parked "
                       "requests re-read every %s s until it is back", what, type(exc).__name__, exc,
                       LAYER_RETRY_SECONDS)

    # ----------------------------------------------------------------------------- joining

    async def watch(self, key: str, *, first: bool) -> None:
        """A member joined ``key``; returns once Redis subscribed this process to it (or at once
        while the bus is down: the resubscription covers it)."""
        self._ensure_running()
        commands = self._commands
        if commands is None:
            if not self._outage and self._settled is not None:  # starting: its subscriptions cover the key
                try:
                    await asyncio.wait_for(self._settled.wait(), CONFIRM_SECONDS)
                except TimeoutError:
                    self._late = True  # this member re-reads every second until the bus is up
            return
        waiting = self._confirm.get(key)
        if first:
            confirmed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            waiting = self._confirm.setdefault(key, deque())
            waiting.append(confirmed)
            commands.put_nowait(("SUBSCRIBE", self.channel(key)))
        if waiting:  # another member's subscription may still be on its way: wait for it too
            await asyncio.wait({waiting[-1]}, timeout=CONFIRM_SECONDS)

    def unwatch(self, key: str) -> None:
        """The last member of ``key`` left."""
        commands, loop = self._commands, self._loop
        if commands is None or loop is None:
            return
        command = ("UNSUBSCRIBE", self.channel(key))
        if running_loop() is loop:
            commands.put_nowait(command)
            return
        try:
            loop.call_soon_threadsafe(commands.put_nowait, command)
        except RuntimeError:  # that loop has ended, and its connection with it
            pass

    # --------------------------------------------------------------------------- subscriber

    async def _subscriber(self) -> None:
        while True:
            try:
                await self._session()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._lost(exc)
            await asyncio.sleep(LAYER_RETRY_SECONDS)

    def _connection(self) -> Any:
        pool = ConnectionPool.from_url(self.url, retry=Retry(NoBackoff(), 0), client_name=f"askcards-bus-{os.getpid()}",
                                       socket_connect_timeout=CONNECT_TIMEOUT)
        return pool.make_connection()

    async def _session(self) -> None:
        """One connection's life: subscribe to every key, then read and write until it fails."""
        conn = self._connection()
        read: asyncio.Future[Any] | None = None
        take: asyncio.Future[tuple[Any, ...]] | None = None
        try:
            await conn.connect()
            commands: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
            self._commands = commands
            channels = [self.control, *map(self.channel, self.hub.keys())]
            for start in range(0, len(channels), SUBSCRIBE_CHUNK):
                commands.put_nowait(("SUBSCRIBE", *channels[start:start + SUBSCRIBE_CHUNK]))
            commands.put_nowait(("PING",))
            self._pongs.append(self._became_up)
            read = asyncio.ensure_future(conn.read_response())
            take = asyncio.ensure_future(commands.get())
            silent = 0
            while True:
                done, _ = await asyncio.wait({read, take}, timeout=HEALTH_SECONDS, return_when=asyncio.FIRST_COMPLETED)
                if take in done:
                    await conn.send_command(*take.result(), check_health=False)
                    take = asyncio.ensure_future(commands.get())
                if read in done:
                    self._received(read.result())
                    read = asyncio.ensure_future(conn.read_response())
                    silent = 0
                elif not done:
                    silent += 1
                    if silent > 1:
                        raise ConnectionError(f"no answer from Redis in {2 * HEALTH_SECONDS:.0f} s")
                    commands.put_nowait(("PING",))
                    self._pongs.append(None)
        finally:
            for future in (read, take):
                if future is not None:
                    future.cancel()
            try:
                await conn.disconnect(nowait=True)
            except Exception:
                logger.debug("closing the bus connection failed", exc_info=True)

    def _received(self, reply: Any) -> None:
        kind = reply[0] if isinstance(reply, list) and reply else None
        if kind == b"message":
            self._message(reply[2])
        elif kind == b"subscribe":
            key = reply[1].decode()[len(self.prefix):]
            waiting = self._confirm.get(key)
            if waiting:
                confirmed = waiting.popleft()
                if not waiting:
                    del self._confirm[key]
                if not confirmed.done():
                    confirmed.set_result(None)
        elif kind == b"pong":
            callback = self._pongs.popleft() if self._pongs else None
            if callback is not None:
                callback()

    def _message(self, data: bytes) -> None:
        try:
            envelope = json.loads(data)
            origin, key, message = envelope["o"], envelope["k"], envelope["m"]
        except (ValueError, KeyError, TypeError):
            logger.warning("ignored a bus message that is not askcards': %r", data[:200])
            return
        if origin != self.hub.origin:  # this process's own members had it when it was published
            self.hub.fan_out(key, message)

    def _became_up(self) -> None:
        """Redis confirmed every subscription of the new connection."""
        self.up = True
        if self._settled is not None:
            self._settled.set()
        recovered, self._late = self._outage or self._late, False
        if self._outage:
            self._outage = False
            logger.warning("Redis is back: wakes cross processes again")
        if recovered:
            self.hub.broadcast({"type": REREAD})  # whatever was published meanwhile is read now

    def _lost(self, exc: BaseException) -> None:
        was_up, self.up, self._commands = self.up, False, None
        for waiting in self._confirm.values():
            for confirmed in waiting:
                if not confirmed.done():
                    confirmed.set_result(None)
        self._confirm, self._pongs = {}, deque()
        self._outage_noticed("the bus subscription", exc)
        if self._settled is not None:
            self._settled.set()
        if was_up:
            self.hub.broadcast({"type": REREAD})  # long waits switch to re-reading every second

    # ---------------------------------------------------------------------------- publishing

    def publish(self, messages: list[tuple[str, dict[str, Any]]]) -> None:
        """To the other processes; never raises."""
        encoded = self._encode(messages)
        if running_loop() is None:
            self._publish_now(encoded)
            return
        self._ensure_running()
        assert self._publishes is not None
        self._publishes.put_nowait(encoded)

    async def _publisher(self, queue: asyncio.Queue[list[tuple[str, bytes]]]) -> None:
        client = redis.asyncio.Redis.from_url(self.url, retry=PUBLISH_RETRY, socket_connect_timeout=CONNECT_TIMEOUT,
                                              socket_timeout=SOCKET_TIMEOUT)
        try:
            while True:
                batch = await queue.get()
                while len(batch) < PUBLISH_BATCH and not queue.empty():
                    batch.extend(queue.get_nowait())
                try:
                    async with client.pipeline(transaction=False) as pipe:
                        for channel, data in batch:
                            pipe.publish(channel, data)
                        await pipe.execute()
                except Exception as exc:
                    self._outage_noticed(f"{len(batch)} wake(s) not published", exc)
                else:
                    if self._outage and self.up:
                        self._outage = False
        finally:
            await client.aclose()

    def _publish_now(self, encoded: list[tuple[str, bytes]]) -> None:
        """From code with no event loop: sent before returning (one pipeline)."""
        if self._sync_client is None:
            self._sync_client = redis.Redis.from_url(self.url, retry=SyncRetry(NoBackoff(), 1),
                                                     socket_connect_timeout=CONNECT_TIMEOUT, socket_timeout=SOCKET_TIMEOUT)
        try:
            pipe = self._sync_client.pipeline(transaction=False)
            for channel, data in encoded:
                pipe.publish(channel, data)
            pipe.execute()
        except Exception as exc:
            self._outage_noticed(f"{len(encoded)} wake(s) not published", exc)
        else:
            self._outage = False
