"""Issue 10, point 5: the panel socket compares an Origin's scheme, host and port.

With alice's session cookie, a page on another port, another scheme or another host must not open
her panel socket (it would read and answer her asks); her own page must, and gets her asks."""
import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.test import Client

from askcards import services
from project.asgi import application
from tests.conftest import QUESTIONS

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


@pytest.fixture
def web_surface(settings, recording_surface):
    settings.ASKCARDS_SURFACES = ["askcards.surfaces.web.WebSurface"]


@pytest.fixture
def alice(db):
    return get_user_model().objects.create_user("alice", password="pw-alice-123")


async def _socket(user, origin: str | None, host: str = "127.0.0.1:8000", scheme: str = "ws", extra=()):
    client = Client()
    await database_sync_to_async(client.force_login)(user)
    cookie = f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}"
    headers = [(b"cookie", cookie.encode()), (b"host", host.encode()), *extra]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    communicator = WebsocketCommunicator(application, "/ws/panel/", headers=headers)
    communicator.scope["scheme"] = scheme  # the scope is read when the application first runs
    connected, _ = await communicator.connect(timeout=5)
    return communicator, connected


@pytest.mark.parametrize(
    "origin",
    [
        "http://127.0.0.1:9999",  # another app on the same host (the report)
        "http://127.0.0.1",  # same host, port 80
        "https://127.0.0.1:8000",  # same host and port, other scheme
        "http://evil.example:8000",  # other host
        "http://127.0.0.1:8000.evil.example",
        "null",  # sandboxed iframe / file:
        None,  # no Origin at all: not a browser page
    ],
)
async def test_foreign_origins_are_refused(web_surface, alice, origin):
    _, connected = await _socket(alice, origin)
    assert not connected


async def test_own_origin_connects_and_gets_asks(web_surface, alice, agent, web_session):
    outcome = await database_sync_to_async(services.tool_call)(
        agent=agent, session=web_session, name="ask_user_questions", arguments={"questions": QUESTIONS}
    )
    assert outcome.status == "failed"  # nobody present yet; now alice opens her panel
    panel, connected = await _socket(alice, "http://127.0.0.1:8000")
    assert connected
    outcome = await database_sync_to_async(services.tool_call)(
        agent=agent, session=web_session, name="ask_user_questions", arguments={"questions": QUESTIONS}
    )
    history = await panel.receive_json_from(timeout=5)  # every connect starts with the recent history
    assert history == {"type": "history", "asks": []}
    message = await panel.receive_json_from(timeout=5)
    assert (message["type"], message["requestId"]) == ("ask_user_questions", outcome.ask.id)
    await panel.disconnect()


async def test_host_not_allowed_is_no_own_origin(web_surface, alice):
    _, connected = await _socket(alice, "http://evil.example", host="evil.example")
    assert not connected


async def test_public_url_origin_behind_a_proxy(web_surface, alice, settings):
    settings.ASKCARDS_PUBLIC_URL = "https://asks.example.com"
    settings.CSRF_TRUSTED_ORIGINS = []
    _, connected = await _socket(alice, "https://asks.example.com")  # the proxy passed Host 127.0.0.1:8000
    assert connected
    _, connected = await _socket(alice, "http://asks.example.com")
    assert not connected
    _, connected = await _socket(alice, "https://asks.example.com:8443")
    assert not connected


async def test_tls_terminating_proxy_header_gives_the_https_origin(web_surface, alice, settings):
    settings.ALLOWED_HOSTS = ["asks.example.com"]
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    proto = [(b"x-forwarded-proto", b"https")]
    _, connected = await _socket(alice, "https://asks.example.com", host="asks.example.com", extra=proto)
    assert connected
    _, connected = await _socket(alice, "http://asks.example.com", host="asks.example.com", extra=proto)
    assert not connected
    _, connected = await _socket(alice, "https://asks.example.com", host="asks.example.com")  # no proxy header
    assert not connected


async def test_wss_socket_origin_is_https(web_surface, alice):
    _, connected = await _socket(alice, "https://127.0.0.1:8443", host="127.0.0.1:8443", scheme="wss")
    assert connected
    _, connected = await _socket(alice, "http://127.0.0.1:8443", host="127.0.0.1:8443", scheme="wss")
    assert not connected


async def test_csrf_trusted_origins_with_subdomain_wildcard(web_surface, alice, settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://*.example.org"]
    _, connected = await _socket(alice, "https://panel.example.org")
    assert connected
    for origin in ("http://panel.example.org", "https://panel.example.org:8443", "https://example.org.evil.net"):
        _, connected = await _socket(alice, origin)
        assert not connected, origin
