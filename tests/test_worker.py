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


def test_housekeeping_drops_panel_presence_gone_stale(db):
    from askcards.models import PanelPresence
    from askcards.surfaces.web import PRESENCE_TTL

    now = timezone.now()
    PanelPresence.objects.create(channel_name="crashed", username="ann", last_seen=now - PRESENCE_TTL - timedelta(seconds=1))
    PanelPresence.objects.create(channel_name="live", username="bob", last_seen=now)
    Worker().housekeeping()
    assert list(PanelPresence.objects.values_list("channel_name", flat=True)) == ["live"]


def test_card_sync_gathers_after_a_busy_pass_and_other_lanes_do_not():
    from django.conf import settings

    from askcards.worker import CARD_SYNC_GATHER_SECONDS

    worker = Worker()
    assert worker.pause_after(worker.card_sync, 3) == CARD_SYNC_GATHER_SECONDS > 0
    assert worker.pause_after(worker.deadlines, 3) == worker.pause_after(worker.deliveries, 3) == 0
    assert worker.pause_after(worker.card_sync, 0) == settings.ASKCARDS_WORKER_TICK_SECONDS
