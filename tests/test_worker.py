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

    now = timezone.now()
    stale = now - PanelPresence.TTL - timedelta(seconds=1)
    PanelPresence.objects.create(channel_name="crashed", username="ann", last_seen=stale)
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


# Out of file descriptors (issue 23: a slow-client storm took them all and the worker logged 238
# tracebacks in 30 s): one warning, a back-off, and the lanes resume by themselves.

class CountedStop:
    """A stop event for ``Worker._loop`` that records each pause instead of sleeping, and is set
    once ``until`` says so."""

    def __init__(self, until):
        self.pauses: list[float] = []
        self.until = until

    def is_set(self) -> bool:
        return self.until(self.pauses)

    def wait(self, seconds: float) -> bool:
        self.pauses.append(seconds)
        return False


def emfile_then_ok(failures: int):
    import errno

    calls = {"n": 0}

    def deliveries() -> int:  # named like a lane: the warning names it
        calls["n"] += 1
        if calls["n"] <= failures:
            raise OSError(errno.EMFILE, "Too many open files")
        return 0

    return deliveries, calls


def worker_records(caplog):
    return [r for r in caplog.records if r.name == "askcards.worker"]


def test_a_lane_out_of_file_descriptors_backs_off_with_one_warning_and_resumes(caplog):
    from django.conf import settings

    lane, calls = emfile_then_ok(failures=7)
    stop = CountedStop(until=lambda pauses: len(pauses) >= 9)
    caplog.set_level("INFO", logger="askcards.worker")
    Worker()._loop(lane, stop)
    tick = settings.ASKCARDS_WORKER_TICK_SECONDS
    assert stop.pauses == [1, 2, 4, 8, 16, 30, 30, tick, tick]
    assert calls["n"] == 9
    records = worker_records(caplog)
    assert [(r.levelname, r.exc_info) for r in records] == [("WARNING", None), ("INFO", None)]
    assert "out of file descriptors (lane deliveries: OSError, EMFILE)" in records[0].getMessage()
    assert "available again" in records[1].getMessage()


def test_the_lanes_share_one_warning_and_a_new_shortage_warns_again_only_a_minute_later(caplog):
    import errno

    from askcards import worker as worker_module

    now = [0.0]
    caplog.set_level("INFO", logger="askcards.worker")
    shortage = worker_module.DescriptorShortage(clock=lambda: now[0])
    exc = OSError(errno.EMFILE, "Too many open files")
    for lane in ("deadlines", "deliveries", "card_sync", "housekeeping"):
        shortage.hit(lane, exc)
    shortage.over()
    now[0] = 10.0
    shortage.hit("deadlines", exc)  # back within the minute: backs off, says nothing
    shortage.over()
    now[0] = 70.0
    shortage.hit("deliveries", exc)
    messages = [r.getMessage() for r in worker_records(caplog)]
    assert [m.split(" (")[0] for m in messages] == [
        "worker: the process is out of file descriptors", "worker: file descriptors are available again; lanes resumed",
        "worker: the process is out of file descriptors"]


def test_a_pass_does_not_start_without_descriptors_to_spare(monkeypatch):
    import errno
    import sqlite3

    from askcards import worker as worker_module

    ran = []
    hidden = sqlite3.OperationalError("unable to open database file")  # SQLite hides the errno
    assert worker_module.out_of_descriptors(hidden) is False  # plenty of descriptors here

    def exhausted(*args, **kwargs):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(worker_module.os, "open", exhausted)
    with pytest.raises(OSError) as raised:
        Worker()._pass(lambda: ran.append(1) or 1)
    assert raised.value.errno == errno.EMFILE and ran == []
    assert worker_module.out_of_descriptors(hidden) is True


def test_other_failures_still_log_their_traceback(caplog):
    def housekeeping() -> int:
        raise ValueError("a bug")

    stop = CountedStop(until=lambda pauses: len(pauses) >= 2)
    Worker()._loop(housekeeping, stop)
    errors = [r for r in worker_records(caplog) if r.levelname == "ERROR"]
    assert len(errors) == 2 and all(r.exc_info and r.exc_info[0] is ValueError for r in errors)


def test_the_servers_async_lanes_back_off_and_resume_too(caplog, monkeypatch):
    import asyncio

    from askcards import worker as worker_module

    monkeypatch.setattr(worker_module, "FD_BACKOFF_FIRST", 0.01)
    monkeypatch.setattr(worker_module, "FD_BACKOFF_MAX", 0.04)
    lane, calls = emfile_then_ok(failures=4)
    caplog.set_level("INFO", logger="askcards.worker")

    async def scenario():
        task = asyncio.create_task(Worker()._lane_async(lane))
        async with asyncio.timeout(10):
            while calls["n"] < 6:
                await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(scenario())
    levels = [r.levelname for r in worker_records(caplog)]
    assert levels == ["WARNING", "INFO"]
