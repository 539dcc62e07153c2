"""What the platform clients (Feishu, DingTalk) share on the wire: the HTTP session and this
thread's client of a bot."""
from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import requests

if TYPE_CHECKING:
    from askcards.models import Bot

T = TypeVar("T")


def http_session(base_url: str) -> requests.Session:
    """The HTTP session a platform client talks to ``base_url`` with.

    Proxies (``HTTPS_PROXY``/``NO_PROXY``) and a CA bundle (``REQUESTS_CA_BUNDLE``) are taken from
    the environment once, here: requests would re-read the whole environment on every call, a tenth
    of a card push's CPU in tests/bench."""
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
