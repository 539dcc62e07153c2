"""What the platform clients (Feishu, DingTalk) share on the wire: the HTTP session and this
thread's client of a bot, the one error type, the one retry loop, and the access-token cache.

Failures of a platform call raise ``PlatformError`` (each platform's subclass adds its codes):
``permanent`` says whether trying the same call again can succeed, ``retry_after`` how long to wait
first. ``call_with_retries`` is the retry loop of every call.
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import requests
from django.core.cache import cache

if TYPE_CHECKING:
    from askcards.models import Bot

logger = logging.getLogger(__name__)

T = TypeVar("T")


def http_session(base_url: str) -> requests.Session:
    """The HTTP session a platform client talks to ``base_url`` with.

    Proxies (``HTTPS_PROXY``/``NO_PROXY``) and a CA bundle (``REQUESTS_CA_BUNDLE``) are taken from
    the environment once, here: requests would re-read the whole environment on every call, a
    noticeable share of a card push's CPU in tests/bench."""
    session = requests.Session()
    session.proxies.update(requests.utils.get_environ_proxies(base_url))
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    if bundle:
        session.verify = bundle
    session.trust_env = False
    return session


_thread_clients = threading.local()


def thread_client(bot: Bot, make: Callable[[], T], *variant: Any) -> T:
    """This thread's platform client of ``bot`` (``make()`` builds it), kept so its HTTP connection
    is reused from one push to the next; a new one once the bot's id, URL or secret change.
    Per thread, because a ``requests.Session`` is not shared across threads."""
    key = (bot.platform, bot.pk, bot.app_id, bot.base_url, hashlib.sha256(bot.app_secret.encode()).hexdigest(), *variant)
    clients = getattr(_thread_clients, "by_bot", None)
    if clients is None:
        clients = _thread_clients.by_bot = {}
    client = clients.get(key)
    if client is None:
        client = clients[key] = make()
    return client


class PlatformError(Exception):
    """A platform call failed. ``permanent``: the same call cannot succeed later (bad request,
    refused credentials); otherwise ``retry_after`` is how many seconds to wait before trying
    again, None when nobody said. ``token_rejected``: the platform refused the access token sent
    (expired early, revoked), so a new one may succeed at once. Never holds a secret or a token."""

    def __init__(self, message: str, *, permanent: bool, retry_after: float | None = None,
                 token_rejected: bool = False):
        super().__init__(message)
        self.message = message
        self.permanent = permanent
        self.retry_after = retry_after
        self.token_rejected = token_rejected


@dataclass(frozen=True)
class RetryPolicy:
    """How a client retries one call: at most ``max_attempts`` tries; after the n-th retryable
    failure it waits ``backoff * 2 ** (n - 1)`` seconds, at most ``max_backoff``, or longer when
    the platform said so (``retry_after``), and gives up early when that wait would end more than
    ``max_retry_seconds`` after the first try (None: no such bound)."""

    max_attempts: int = 4
    backoff: float = 0.5
    max_backoff: float = 4.0
    max_retry_seconds: float | None = None
    sleep: Callable[[float], Any] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")

    def wait(self, error: PlatformError, attempt: int) -> float:
        return max(error.retry_after or 0.0, min(self.backoff * 2.0 ** (attempt - 1), self.max_backoff))


def call_with_retries(
    send: Callable[[str | None], T],
    policy: RetryPolicy,
    *,
    token: Callable[[], str] | None = None,
    forget_token: Callable[[], None] | None = None,
) -> T:
    """One platform call: ``send(access_token)`` returns its result or raises ``PlatformError``.

    ``token`` (for calls that need one) gives the access token before every try; a failure to get
    it is raised as it is (the token request retried on its own). An error with ``token_rejected``
    makes the client ``forget_token`` and try again at once, once per call and not counted as an
    attempt. A permanent error is raised at once; a retryable one is retried as ``policy`` says,
    then raised with ``retry_after`` set to the wait that would have come next."""
    started = policy.clock()
    attempt = 0
    token_refreshed = False
    while True:
        try:
            return send(token() if token is not None else None)
        except PlatformError as error:
            if error.token_rejected and forget_token is not None and not token_refreshed:
                logger.info("%s: the access token was refused; fetching a new one", error)
                token_refreshed = True
                forget_token()
                continue
            if error.permanent:
                raise
            attempt += 1
            wait = error.retry_after = policy.wait(error, attempt)
            budget = policy.max_retry_seconds
            if attempt >= policy.max_attempts or (budget is not None and policy.clock() - started + wait > budget):
                raise
            logger.warning("%s (attempt %d of %d); retrying in %.2f s", error, attempt, policy.max_attempts, wait)
            policy.sleep(wait)


class _CacheOutage:
    """Whether this process last found the token cache failing: one warning when an outage
    starts, one line when the cache answers again, nothing in between. While it is down the
    cache is tried again at most once every ``retry_seconds`` (``skip``): a Redis that times out
    instead of refusing would otherwise cost every platform call its socket timeout."""

    def __init__(self, retry_seconds: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.retry_seconds = retry_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self.down = False
        self._retry_at = 0.0

    def skip(self) -> bool:
        """Whether to leave the cache alone for now: it failed less than ``retry_seconds`` ago."""
        return self.down and self._clock() < self._retry_at

    def failed(self, operation: str, key_owner: str, exc: Exception) -> None:
        with self._lock:
            started, self.down = not self.down, True
            self._retry_at = self._clock() + self.retry_seconds
        if started:
            logger.warning(
                "token cache %s failed for %s (%s): access tokens are kept in this process until it answers again",
                operation, key_owner, type(exc).__name__,
            )

    def answered(self) -> None:
        if not self.down:  # the common case, without the lock
            return
        with self._lock:
            ended, self.down = self.down, False
        if ended:
            logger.info("token cache answers again; access tokens are shared once more")


_outage = _CacheOutage()


class _LocalTokens:
    """This process's own copy of the access tokens it was given or fetched, one per app, read only
    while the shared cache fails: an outage then costs a process one token request per app, not
    one per platform call. A copy expires when its entry in the shared cache does (the token's
    expiry less the client's safety margin, by the client's clock); at most ``limit`` apps are
    kept, the longest unrefreshed going first."""

    def __init__(self, limit: int = 256) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._tokens: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def get(self, key: str, now: float) -> str | None:
        with self._lock:
            entry = self._tokens.get(key)
            if entry is None:
                return None
            token, expires_at = entry
            if now >= expires_at:
                del self._tokens[key]
                return None
            return token

    def put(self, key: str, token: str, expires_at: float) -> None:
        with self._lock:
            self._tokens.pop(key, None)
            self._tokens[key] = (token, expires_at)
            while len(self._tokens) > self.limit:
                self._tokens.popitem(last=False)

    def drop(self, key: str) -> None:
        with self._lock:
            self._tokens.pop(key, None)


_local_tokens = _LocalTokens()


class TokenCache:
    """One app's access token in Django's cache, shared by every process of the deployment.

    An outage of the cache backend (Redis down) must not stop platform calls: a failed read falls
    back on this process's own copy of the token (``_LocalTokens``, written whenever a token is
    stored), a miss when it has none or it expired, and a failed write or delete is dropped, so the
    client fetches a token at most once per app and outage and carries on; for a few seconds after
    a failure the cache is not tried at all (``_CacheOutage.skip``). Forgetting a token (the
    platform refused it) drops the process's copy too. The log says so once per outage, naming the
    app, never the token. ``clock`` times the local copy (the client's clock, monotonic)."""

    def __init__(self, key: str, owner: str, clock: Callable[[], float] = time.monotonic):
        self.key = key
        self.owner = owner  # who the token is for, as the log names it ("Feishu app cli_x")
        self._clock = clock

    def get(self) -> str | None:
        if _outage.skip():
            return _local_tokens.get(self.key, self._clock())
        try:
            token = cache.get(self.key)
        except Exception as exc:
            _outage.failed("read", self.owner, exc)
            return _local_tokens.get(self.key, self._clock())
        _outage.answered()
        return token if isinstance(token, str) and token else None

    def set(self, token: str, ttl: float) -> None:
        _local_tokens.put(self.key, token, self._clock() + ttl)
        if _outage.skip():
            return
        try:
            cache.set(self.key, token, timeout=ttl)
        except Exception as exc:
            _outage.failed("write", self.owner, exc)
            return
        _outage.answered()

    def delete(self) -> None:
        _local_tokens.drop(self.key)
        if _outage.skip():
            return
        try:
            cache.delete(self.key)
        except Exception as exc:
            _outage.failed("delete", self.owner, exc)
            return
        _outage.answered()
