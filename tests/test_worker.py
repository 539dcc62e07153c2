import pytest
from datetime import timedelta

from django.core.management import call_command
from django.utils import timezone

from askcards.models import Ask
from askcards.worker import Worker

# The worker closes its database connections after each step, as a long-running process must.
pytestmark = pytest.mark.django_db(transaction=True)


def test_worker_step_expires_passed_deadline(pending_ask):
    Ask.objects.filter(pk=pending_ask.pk).update(deadline=timezone.now() - timedelta(days=2))
    assert Worker().step() >= 1
    pending_ask.refresh_from_db()
    assert (pending_ask.status, pending_ask.reason) == ("expired", "timeout")


def test_worker_step_runs_surface_card_sync(recording_surface, db):
    Worker().step()
    assert ("sync_due", "", "") in recording_surface.calls


def test_worker_step_idle_finds_no_work(db):
    assert Worker().step() == 0


def test_worker_once_command_reports_work(pending_ask, capsys):
    Ask.objects.filter(pk=pending_ask.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    call_command("askcards_worker", "--once")
    pending_ask.refresh_from_db()
    assert pending_ask.status == "expired"
