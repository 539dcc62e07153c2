"""Webhooks cannot be aimed inside our network (issue 10 point 4, SPEC §8): http/https only,
link-local and metadata addresses never, loopback/private only with ASKCARDS_WEBHOOK_ALLOW_PRIVATE,
checked on the address resolved at delivery and connected to as checked, redirects never followed,
bounded by connect and read timeouts. Every server here listens on 127.0.0.1; names resolve through
a patched socket.getaddrinfo (no real DNS)."""
from __future__ import annotations

import datetime
import io
import json
import socket
import ssl
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from askcards import crypto, outbox, services
from askcards.http import netguard
from askcards.errors import InvalidInput
from askcards.models import Agent, OutboxEvent
from tests.conftest import answer_for
from tests.webhooks import signature_valid

pytestmark = pytest.mark.django_db

REFUSED_URLS = [
    ("file:///etc/passwd", "must use http or https, not 'file'"),
    ("javascript:alert(1)", "must use http or https, not 'javascript'"),
    ("not-a-url", "is not a URL"),
    ("http://169.254.169.254/", "link-local or cloud metadata address"),
    ("http://127.0.0.1", "refused unless ASKCARDS_WEBHOOK_ALLOW_PRIVATE=true"),
]


class StubServer:
    """Records every request; ``routes`` maps a path to (status, extra headers)."""

    def __init__(self, routes: dict[str, tuple[int, dict[str, str]]]):
        self.routes = routes
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self):
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                stub.requests.append((self.command, self.path, dict(self.headers), body))
                status, headers = stub.routes.get(self.path, (404, {}))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", "0")
                self.end_headers()

            do_GET = do_POST = _handle

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port
        self.base = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def paths(self) -> list[str]:
        return [path for _method, path, _headers, _body in self.requests]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub_factory():
    made = []

    def make(routes):
        stub = StubServer(routes)
        made.append(stub)
        return stub

    yield make
    for stub in made:
        stub.close()


@pytest.fixture
def fake_dns(monkeypatch):
    """Names in ``answers`` resolve to the listed addresses (a list per lookup, the last repeats);
    every other name goes to the real resolver (numeric addresses only, in these tests)."""
    real = socket.getaddrinfo
    answers: dict[str, list[list[str]]] = {}
    lookups: list[str] = []

    def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
        name = host.decode() if isinstance(host, bytes) else host
        if name not in answers:
            return real(host, port, family, type, proto, flags)
        lookups.append(name)
        addresses = answers[name].pop(0) if len(answers[name]) > 1 else answers[name][0]
        return [
            (socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, int(port), 0, 0))
            if ":" in address
            else (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, int(port)))
            for address in addresses
        ]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return answers, lookups


def _closed_event(agent, pending_ask, url: str) -> OutboxEvent:
    """Point the agent's webhook at ``url`` (as an operator did before this check existed, or
    through a name checked at creation) and close an ask so one event is due."""
    Agent.objects.filter(pk=agent.pk).update(webhook_url=url, webhook_secret=crypto.new_webhook_secret())
    services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="web")
    return OutboxEvent.objects.get(ask=pending_ask)


def _assert_failed_and_retried(event: OutboxEvent, error: str) -> None:
    event.refresh_from_db()
    assert event.delivered_at is None and event.failed_at is None
    assert event.attempts == 1 and error in event.last_error
    assert event.next_attempt_at > timezone.now()


# ------------------------------------------------------------------------ setting the URL


@pytest.mark.parametrize(("url", "message"), REFUSED_URLS)
def test_agent_command_refuses_webhook_url(url, message):
    with pytest.raises(CommandError, match=message):
        call_command("askcards_agent", "create", "hooked", "--webhook-url", url, stdout=io.StringIO())
    assert not Agent.objects.filter(name="hooked").exists()


@pytest.mark.parametrize(("url", "message"), REFUSED_URLS)
def test_agent_create_service_refuses_webhook_url(url, message):
    with pytest.raises(InvalidInput, match=message):
        services.agent_create(name="hooked", webhook_url=url)
    assert not Agent.objects.filter(name="hooked").exists()


@pytest.mark.parametrize(
    "url",
    [
        "http://[fd00:ec2::254]/",  # AWS metadata over IPv6
        "http://100.100.100.200/",  # Alibaba Cloud metadata
        "http://[::ffff:169.254.169.254]/",  # IPv4-mapped
        "http://0.0.0.0:8000/",
    ],
)
def test_metadata_addresses_are_refused_even_when_private_is_allowed(settings, url):
    settings.ASKCARDS_WEBHOOK_ALLOW_PRIVATE = True
    with pytest.raises(InvalidInput, match="always refused"):
        services.agent_create(name="hooked", webhook_url=url)


@pytest.mark.parametrize("url", ["http://2130706433/", "http://0x7f.1/", "http://localhost:8000/"])
def test_loopback_in_disguise_is_refused(url):
    with pytest.raises(InvalidInput, match="a loopback or private address"):
        services.agent_create(name="hooked", webhook_url=url)


def test_loopback_is_accepted_when_private_is_allowed(settings):
    settings.ASKCARDS_WEBHOOK_ALLOW_PRIVATE = True
    out = io.StringIO()
    url = "http://127.0.0.1:8080/hook"
    call_command("askcards_agent", "create", "hooked", "--webhook-url", url, "--json", stdout=out)
    assert Agent.objects.get(name="hooked").webhook_url == url
    assert json.loads(out.getvalue())["webhook_secret"]


def test_admin_change_refuses_metadata_webhook_url(admin_client, agent):
    response = admin_client.post(
        reverse("admin:askcards_agent_change", args=[agent.pk]),
        {"name": agent.name, "webhook_url": "http://169.254.169.254/latest/meta-data/", "is_active": "on"},
    )
    assert response.status_code == 200
    assert "link-local or cloud metadata address" in response.content.decode()
    agent.refresh_from_db()
    assert (agent.webhook_url, agent.webhook_secret) == ("", "")


def test_admin_add_refuses_private_webhook_url(admin_client):
    response = admin_client.post(
        reverse("admin:askcards_agent_add"), {"name": "hooked", "webhook_url": "http://10.0.0.5/hook"}
    )
    assert "refused unless ASKCARDS_WEBHOOK_ALLOW_PRIVATE=true" in response.content.decode()
    assert not Agent.objects.filter(name="hooked").exists()


# ------------------------------------------------------------------------------- delivery


@pytest.mark.parametrize("status", [307, 302])
def test_worker_does_not_follow_redirects(settings, agent, pending_ask, stub_factory, status):
    settings.ASKCARDS_WEBHOOK_ALLOW_PRIVATE = True
    stub = stub_factory({"/hook": (status, {"location": "/elsewhere"}), "/elsewhere": (200, {})})
    event = _closed_event(agent, pending_ask, f"{stub.base}/hook")
    assert outbox.deliver_due() == 1
    assert stub.paths() == ["/hook"]  # the redirect target received nothing
    _assert_failed_and_retried(event, f"HTTP {status} (redirects are not followed)")


def test_redirect_failure_is_retried_until_the_window_closes(settings, agent, pending_ask, stub_factory):
    settings.ASKCARDS_WEBHOOK_ALLOW_PRIVATE = True
    stub = stub_factory({"/hook": (307, {"location": "/elsewhere"}), "/elsewhere": (200, {})})
    event = _closed_event(agent, pending_ask, f"{stub.base}/hook")
    outbox.deliver_due()
    event.refresh_from_db()
    outbox.deliver_due(now=event.next_attempt_at + timedelta(seconds=1))
    assert stub.paths() == ["/hook", "/hook"]
    event.refresh_from_db()
    assert event.attempts == 2 and event.delivered_at is None


def test_stored_loopback_url_is_refused_at_delivery_without_the_setting(agent, pending_ask, stub_factory, caplog):
    stub = stub_factory({"/hook": (200, {})})
    event = _closed_event(agent, pending_ask, f"{stub.base}/hook?token=s3cret")
    outbox.deliver_due()
    assert stub.requests == []
    _assert_failed_and_retried(event, "refused: webhook URL points to 127.0.0.1")
    agent.refresh_from_db()
    logged = caplog.text
    assert "s3cret" not in logged and agent.webhook_secret not in logged and "PostgreSQL" not in logged


def test_name_rebound_to_loopback_is_refused_at_delivery(agent, pending_ask, stub_factory, fake_dns):
    answers, _ = fake_dns
    stub = stub_factory({"/hook": (200, {})})
    answers["hook.test"] = [["93.184.216.34"]]  # what the name pointed at when it was configured
    created, _ = services.agent_create(name="hooked", webhook_url=f"http://hook.test:{stub.port}/hook")
    answers["hook.test"] = [["127.0.0.1"]]  # and what it points at when the worker delivers
    event = _closed_event(agent, pending_ask, created.webhook_url)
    outbox.deliver_due()
    assert stub.requests == []
    _assert_failed_and_retried(event, "refused: hook.test resolves to 127.0.0.1, a loopback or private address")


def test_any_metadata_address_among_the_answers_refuses_delivery(
    settings, agent, pending_ask, stub_factory, fake_dns
):
    settings.ASKCARDS_WEBHOOK_ALLOW_PRIVATE = True
    answers, _ = fake_dns
    stub = stub_factory({"/hook": (200, {})})
    answers["hook.test"] = [["127.0.0.1", "169.254.169.254"]]
    event = _closed_event(agent, pending_ask, f"http://hook.test:{stub.port}/hook")
    outbox.deliver_due()
    assert stub.requests == []
    _assert_failed_and_retried(event, "hook.test resolves to 169.254.169.254, a link-local or cloud metadata address")


def test_delivery_connects_to_the_address_it_checked(settings, agent, pending_ask, stub_factory, fake_dns):
    """A rebinding answer after the check (loopback first, metadata on any later lookup) cannot
    move the connection: the name is resolved once and the checked address is dialled."""
    settings.ASKCARDS_WEBHOOK_ALLOW_PRIVATE = True
    answers, lookups = fake_dns
    stub = stub_factory({"/hook": (204, {})})
    answers["hook.test"] = [["127.0.0.1"], ["169.254.169.254"]]
    event = _closed_event(agent, pending_ask, f"http://hook.test:{stub.port}/hook")
    assert outbox.deliver_due() == 1
    event.refresh_from_db()
    assert event.delivered_via == "webhook" and lookups == ["hook.test"]
    assert stub.requests[0][2]["Host"] == f"hook.test:{stub.port}"


def test_international_name_is_sent_idna_encoded_in_the_host_header(settings, stub_factory, fake_dns):
    answers, _ = fake_dns
    stub = stub_factory({"/hook": (200, {})})
    answers["例え.test"] = [["127.0.0.1"]]
    status = netguard.post(
        f"http://例え.test:{stub.port}/hook", body=b"{}", headers={}, allow_private=True,
        connect_timeout=2, read_timeout=2,
    )  # fmt: skip
    assert status == 200 and stub.requests[0][2]["Host"] == f"xn--r8jz45g.test:{stub.port}"


def test_private_delivery_works_and_is_signed_when_allowed(settings, agent, pending_ask, stub_factory):
    settings.ASKCARDS_WEBHOOK_ALLOW_PRIVATE = True
    stub = stub_factory({"/hook": (200, {})})
    event = _closed_event(agent, pending_ask, f"{stub.base}/hook")
    assert outbox.deliver_due() == 1
    agent.refresh_from_db()
    _method, _path, headers, body = stub.requests[0]
    secret, webhook_id, timestamp = agent.webhook_secret, headers["webhook-id"], int(headers["webhook-timestamp"])
    assert signature_valid(secret, webhook_id, timestamp, body, headers["webhook-signature"])
    event.refresh_from_db()
    assert event.delivered_at is not None and event.last_error == ""


@pytest.fixture
def silent_server():
    """Accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    accepted = []
    stop = threading.Event()

    def accept():
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1], accepted
    stop.set()
    thread.join(timeout=2)
    for conn in accepted:
        conn.close()
    listener.close()


def test_silent_receiver_hits_the_read_timeout(settings, agent, pending_ask, silent_server):
    settings.ASKCARDS_WEBHOOK_ALLOW_PRIVATE = True
    settings.ASKCARDS_WEBHOOK_READ_TIMEOUT_SECONDS = 0.5
    port, accepted = silent_server
    event = _closed_event(agent, pending_ask, f"http://127.0.0.1:{port}/hook")
    started = time.monotonic()
    outbox.deliver_due()
    assert time.monotonic() - started < 5
    assert accepted  # it connected, then waited for an answer that never came
    _assert_failed_and_retried(event, "ReadTimeout")


def test_undeliverable_redirect_gives_up_when_the_window_closes(settings, agent, pending_ask, stub_factory):
    settings.ASKCARDS_WEBHOOK_ALLOW_PRIVATE = True
    settings.ASKCARDS_WEBHOOK_RETRY_HOURS = 0
    stub = stub_factory({"/hook": (308, {"location": "/elsewhere"})})
    event = _closed_event(agent, pending_ask, f"{stub.base}/hook")
    outbox.deliver_due(now=timezone.now() + timedelta(seconds=1))
    event.refresh_from_db()
    assert event.failed_at is not None and event.next_attempt_at is None
    assert event.last_error == "HTTP 308 (redirects are not followed)"


# ------------------------------------------------------------------ TLS to a pinned address


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    """A test CA and a certificate for hook.test it signed."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "askcards test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hook.test")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("hook.test")]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    folder = tmp_path_factory.mktemp("tls")
    (folder / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return folder


@pytest.fixture
def tls_stub(stub_factory, tls_files):
    stub = stub_factory({"/hook": (200, {})})
    seen_sni: list[str | None] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls_files / "cert.pem", tls_files / "key.pem")
    context.sni_callback = lambda sock, name, ctx: seen_sni.append(name)
    stub.server.socket = context.wrap_socket(stub.server.socket, server_side=True)
    return stub, seen_sni


def _post(url: str, **extra):
    return netguard.post(
        url, body=b"{}", headers={"content-type": "application/json"}, allow_private=True,
        connect_timeout=2, read_timeout=2, **extra,
    )  # fmt: skip


def test_tls_to_the_pinned_address_checks_the_hostname(tls_stub, tls_files, fake_dns):
    stub, seen_sni = tls_stub
    answers, _ = fake_dns
    answers["hook.test"] = [["127.0.0.1"]]
    assert _post(f"https://hook.test:{stub.port}/hook", verify=str(tls_files / "ca.pem")) == 200
    assert seen_sni == ["hook.test"]
    assert stub.requests[0][2]["Host"] == f"hook.test:{stub.port}"


def test_tls_certificate_for_another_name_is_rejected(tls_stub, tls_files, fake_dns):
    stub, _ = tls_stub
    answers, _ = fake_dns
    answers["other.test"] = [["127.0.0.1"]]
    with pytest.raises(requests.exceptions.SSLError):
        _post(f"https://other.test:{stub.port}/hook", verify=str(tls_files / "ca.pem"))
    assert stub.requests == []
