"""Webhook delivery against a real HTTP server on 127.0.0.1."""
import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import timezone

from askcards import crypto, outbox, services
from askcards.models import Ask, OutboxEvent
from tests.conftest import answer_for
from tests.webhooks import signature_valid


class Receiver:
    def __init__(self, statuses):
        self.statuses = list(statuses)  # status to answer per request; the last one repeats
        self.requests = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                receiver.requests.append((dict(self.headers), body))
                status = receiver.statuses.pop(0) if len(receiver.statuses) > 1 else receiver.statuses[0]
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver_factory(settings):
    settings.ASKCARDS_WEBHOOK_ALLOW_PRIVATE = True  # the receivers listen on 127.0.0.1
    made = []

    def make(*statuses):
        receiver = Receiver(statuses or (200,))
        made.append(receiver)
        return receiver

    yield make
    for receiver in made:
        receiver.close()


def _hooked_answer(agent, pending_ask, url):
    agent.webhook_url = url
    agent.webhook_secret = crypto.new_webhook_secret()
    agent.save()
    services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="web")
    return OutboxEvent.objects.get(ask=pending_ask)


def test_webhook_delivers_signed_event(agent, pending_ask, receiver_factory):
    receiver = receiver_factory(200)
    event = _hooked_answer(agent, pending_ask, receiver.url)
    assert outbox.deliver_due() == 1
    headers, body = receiver.requests[0]
    assert headers["webhook-id"] == event.webhook_id
    assert signature_valid(
        agent.webhook_secret, headers["webhook-id"], int(headers["webhook-timestamp"]), body, headers["webhook-signature"]
    )
    payload = json.loads(body)
    assert (payload["type"], payload["seq"], payload["data"]["ask"]["status"]) == ("ask.closed", 1, "answered")
    event.refresh_from_db()
    assert event.delivered_at is not None and event.delivered_via == "webhook"


def test_webhook_delivery_marks_result_delivered(agent, pending_ask, receiver_factory):
    _hooked_answer(agent, pending_ask, receiver_factory(200).url)
    outbox.deliver_due()
    pending_ask.refresh_from_db()
    assert pending_ask.result_delivered_at is not None


def test_webhook_failure_is_retried_with_backoff(agent, pending_ask, receiver_factory):
    receiver = receiver_factory(500, 200)
    event = _hooked_answer(agent, pending_ask, receiver.url)
    outbox.deliver_due()
    event.refresh_from_db()
    assert (event.delivered_at, event.attempts, event.last_error) == (None, 1, "HTTP 500")
    assert event.next_attempt_at > timezone.now() + timedelta(seconds=3)
    assert outbox.deliver_due() == 0  # not due yet
    assert outbox.deliver_due(now=event.next_attempt_at + timedelta(seconds=1)) == 1
    event.refresh_from_db()
    assert event.delivered_at is not None and len(receiver.requests) == 2


def test_webhook_gives_up_after_retry_window(agent, pending_ask, receiver_factory):
    event = _hooked_answer(agent, pending_ask, receiver_factory(503).url)
    OutboxEvent.objects.filter(pk=event.pk).update(created_at=timezone.now() - timedelta(hours=24))
    outbox.deliver_due()
    event.refresh_from_db()
    assert event.failed_at is not None and event.next_attempt_at is None


def test_webhook_signature_rejects_tampered_body(agent):
    secret = crypto.new_webhook_secret()
    header = crypto.webhook_signature(secret, "evt_1_1", 1700000000, b'{"a":1}')
    assert not signature_valid(secret, "evt_1_1", 1700000000, b'{"a":2}', header)


def test_agent_without_webhook_has_nothing_due(pending_ask):
    services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="web")
    assert outbox.deliver_due() == 0
    assert OutboxEvent.objects.get(ask=pending_ask).next_attempt_at is None


def test_claimed_event_is_not_delivered_twice(agent, pending_ask, receiver_factory):
    receiver = receiver_factory(200)
    event = _hooked_answer(agent, pending_ask, receiver.url)
    OutboxEvent.objects.filter(pk=event.pk).update(claimed_until=timezone.now() + timedelta(seconds=30))
    assert outbox.deliver_due() == 0
    assert receiver.requests == []
    assert Ask.objects.get(pk=pending_ask.pk).result_delivered_at is None


# ---------------------------------------------------------------- where delivery is said

def _delivered(recording_surface, ask_id) -> int:
    return sum(1 for hook, asked, _ in recording_surface.calls if hook == "delivered" and asked == ask_id)


@pytest.mark.django_db
def test_a_result_counts_as_delivered_on_its_surfaces_only_once_the_agent_took_it(agent, pending_ask, recording_surface):
    """A waiter or a task read takes the result: the surfaces (the panel) may say it was delivered,
    once; an answer nobody has taken yet says nothing of the kind."""
    services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="web")
    assert _delivered(recording_surface, pending_ask.id) == 0
    ask = Ask.objects.get(pk=pending_ask.id)
    services.ask_result_returned(ask=ask)
    assert _delivered(recording_surface, pending_ask.id) == 1
    services.ask_result_returned(ask=Ask.objects.get(pk=pending_ask.id))  # already delivered
    assert _delivered(recording_surface, pending_ask.id) == 1


@pytest.mark.django_db
def test_an_acknowledged_feed_delivers_the_results_it_carried(agent, pending_ask, recording_surface):
    services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="web")
    upto = OutboxEvent.objects.filter(agent=agent).order_by("-seq").values_list("seq", flat=True).first()
    assert services.events_acknowledge(agent=agent, upto=upto) >= 1
    assert _delivered(recording_surface, pending_ask.id) == 1


@pytest.mark.django_db
def test_a_webhook_that_took_the_result_delivers_it(agent, pending_ask, recording_surface, receiver_factory):
    from askcards.worker import Worker

    receiver = receiver_factory(200)
    _hooked_answer(agent, pending_ask, receiver.url)
    assert _delivered(recording_surface, pending_ask.id) == 0
    Worker().deliveries()
    assert any(json.loads(body)["type"] == "ask.closed" for _, body in receiver.requests)
    assert _delivered(recording_surface, pending_ask.id) == 1
