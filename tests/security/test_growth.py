"""One key cannot grow the database without bound: what an agent makes through the API ends up
pruned by the worker's housekeeping once it is old (closed asks and everything that belongs to
them), and nothing an agent has still to receive is pruned with it."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from askcards import services
from askcards.models import Ask, AskEvent, OutboxEvent, Respondent
from askcards.worker import Worker
from tests.api.conftest import send
from tests.conftest import QUESTIONS

pytestmark = pytest.mark.django_db


def test_asks_an_agent_made_and_ended_are_pruned_once_old(api, agent, present_session, settings):
    settings.ASKCARDS_ASK_RETENTION_DAYS = 30
    made = []
    for _ in range(5):
        body = {"session": present_session.id, "name": "ask_user_questions", "arguments": {"questions": QUESTIONS}}
        ask_id = send(api, "POST", "/api/v1/tools/call", body).json()["ask"]["id"]
        # The agent cancels it; the response hands it the result, so nothing is left to deliver.
        assert send(api, "POST", f"/api/v1/asks/{ask_id}/cancel", {}).status_code == 200
        made.append(ask_id)
    unread = made.pop()  # ... except this one's event, which the agent never took
    OutboxEvent.objects.filter(ask_id=unread).update(delivered_at=None)
    assert Respondent.objects.filter(ask_id__in=made).exists() and AskEvent.objects.filter(ask_id__in=made).exists()

    Worker().housekeeping()
    assert Ask.objects.filter(pk__in=made).count() == len(made)  # not old yet

    long_ago = timezone.now() - timedelta(days=31)
    Ask.objects.update(created_at=long_ago, closed_at=long_ago)
    worker = Worker()
    worker.housekeeping()
    assert list(Ask.objects.values_list("pk", flat=True)) == [unread]
    for model in (Respondent, AskEvent, OutboxEvent):
        assert not model.objects.filter(ask_id__in=made).exists(), model.__name__
    assert services.events_acknowledge(agent=agent, upto=10_000) >= 1  # now it has it ...
    Ask.objects.filter(pk=unread).update(closed_at=long_ago)
    assert services.asks_prune().deleted == 1  # ... and the last one goes too
