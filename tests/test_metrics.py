"""GET /metrics (issue 13.4): who may scrape, and that the figures are right — read from the
database for what it holds, counted in the process (or across processes in multiprocess mode) for
callbacks, parked requests and card pushes. JSON log lines."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from datetime import timedelta
from ipaddress import ip_network
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from askcards.operators import metrics
from askcards import services
from askcards.runtime.logformat import JsonFormatter
from askcards.models import Ask, Bot, CardMessage, OutboxEvent, PanelPresence
from askcards.surfaces import sync
from tests.conftest import QUESTIONS, answer_for

pytestmark = pytest.mark.django_db

TOKEN = "metrics-token-for-tests-0123456789"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def token(settings):
    settings.ASKCARDS_METRICS_TOKEN = TOKEN
    settings.ASKCARDS_METRICS_ALLOW = ()


def scrape(**headers) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The scraped samples, by name and labels."""
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


# ------------------------------------------------------------------------------------- access


def test_metrics_are_not_served_until_configured(settings):
    settings.ASKCARDS_METRICS_TOKEN, settings.ASKCARDS_METRICS_ALLOW = "", ()
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 404
    assert b"askcards_" not in response.content


def test_scrape_without_the_token_is_refused(token):
    response = Client().get("/metrics")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"askcards_" not in response.content


def test_scrape_with_the_token_is_served(token):
    assert ("askcards_webhook_backlog", ()) in scrape()


def test_allow_list_admits_listed_addresses_without_a_token(settings):
    settings.ASKCARDS_METRICS_TOKEN = ""
    settings.ASKCARDS_METRICS_ALLOW = (ip_network("127.0.0.0/8"),)
    assert Client().get("/metrics").status_code == 200  # the test client comes from 127.0.0.1
    assert Client().get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 403


def test_with_token_and_allow_list_both_are_required(settings):
    settings.ASKCARDS_METRICS_TOKEN = TOKEN
    settings.ASKCARDS_METRICS_ALLOW = (ip_network("10.0.0.0/8"),)
    assert Client().get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 403
    ok = Client().get("/metrics", REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert ok.status_code == 200


def test_metrics_settings_refuse_a_bad_allow_entry(tmp_path):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings", "ASKCARDS_METRICS_ALLOW": "10.0.0.0/8, nope",
           "ASKCARDS_DATA_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0
    assert "ASKCARDS_METRICS_ALLOW: 'nope' is not an IP address or network" in done.stderr


# ---------------------------------------------------------------------------- from the database


def _ask(agent, session):
    return services.tool_call(agent=agent, session=session, name="ask_user_questions",
                              arguments={"questions": QUESTIONS}).ask


def test_asks_created_closed_and_open_are_counted_by_tool_platform_status_and_reason(token, agent, present_session):
    answered, cancelled, _pending = (_ask(agent, present_session) for _ in range(3))
    services.ask_answer(ask_id=answered.id, answers=answer_for(), surface="web")
    services.ask_cancel(ask=cancelled, actor="agent:test")
    samples = scrape()
    tool = {"tool": "ask_user_questions", "platform": "web"}
    assert value(samples, "askcards_asks_created_total", **tool) == 3
    assert value(samples, "askcards_asks_closed_total", **tool, status="answered", reason="submitted") == 1
    assert value(samples, "askcards_asks_closed_total", **tool, status="cancelled", reason="by_agent") == 1
    assert value(samples, "askcards_asks_open", **tool, status="pending") == 1
    assert value(samples, "askcards_responses_total", tool="ask_user_questions", surface="web", status="submitted") == 1


def test_asks_retention_deleted_still_count_so_the_counters_never_go_down(token, agent, present_session, settings):
    settings.ASKCARDS_ASK_RETENTION_DAYS = 180
    answered, cancelled, _pending = (_ask(agent, present_session) for _ in range(3))
    services.ask_answer(ask_id=answered.id, answers=answer_for(), surface="web")
    services.ask_cancel(ask=cancelled, actor="agent:test")
    OutboxEvent.objects.update(delivered_at=timezone.now())  # the agent has both results
    counters = ("askcards_asks_created_total", "askcards_asks_closed_total", "askcards_responses_total")
    before = {key: count for key, count in scrape().items() if key[0] in counters}
    long_ago = timezone.now() - timedelta(days=400)
    Ask.objects.filter(pk__in=[answered.pk, cancelled.pk]).update(created_at=long_ago, closed_at=long_ago)

    assert services.asks_prune().deleted == 2
    assert services.asks_prune().deleted == 0  # nothing counted twice on a second pass
    after = scrape()
    assert {key: count for key, count in after.items() if key[0] in counters} == before
    assert value(after, "askcards_asks_open", tool="ask_user_questions", platform="web", status="pending") == 1
    assert Ask.objects.count() == 1


def test_answer_time_histogram_counts_from_shown_to_answered(token, agent, present_session):
    quick, slow = _ask(agent, present_session), _ask(agent, present_session)
    for ask in (quick, slow):
        services.ask_answer(ask_id=ask.id, answers=answer_for(), surface="web")
    shown = timezone.now() - timedelta(hours=1)
    Ask.objects.filter(pk=quick.pk).update(activated_at=shown, closed_at=shown + timedelta(seconds=42))
    Ask.objects.filter(pk=slow.pk).update(activated_at=shown, closed_at=shown + timedelta(seconds=700))
    samples = scrape()
    tool = {"tool": "ask_user_questions"}
    assert value(samples, "askcards_answer_seconds_bucket", **tool, le="30.0") == 0
    assert value(samples, "askcards_answer_seconds_bucket", **tool, le="60.0") == 1
    assert value(samples, "askcards_answer_seconds_bucket", **tool, le="1800.0") == 2
    assert value(samples, "askcards_answer_seconds_bucket", **tool, le="+Inf") == 2
    assert value(samples, "askcards_answer_seconds_count", **tool) == 2
    assert value(samples, "askcards_answer_seconds_sum", **tool) == pytest.approx(742)


def test_ignored_clicks_are_counted_by_surface_and_cause(token, agent, present_session):
    ask = _ask(agent, present_session)
    services.ask_answer(ask_id=ask.id, answers=answer_for(), surface="web")
    services.ask_answer(ask_id=ask.id, answers=answer_for(), surface="web")  # too late
    services.ask_click_rejected(ask=ask, why="not_sender", actor="respondent:mallory", surface="feishu")
    samples = scrape()
    assert value(samples, "askcards_clicks_ignored_total", surface="web", cause="answered") == 1
    assert value(samples, "askcards_clicks_ignored_total", surface="feishu", cause="not_sender") == 1


def test_webhook_deliveries_and_backlog_come_from_the_outbox(token, agent, present_session):
    agent.webhook_url = "https://agent.example/hook"
    agent.save(update_fields=["webhook_url"])
    for _ in range(3):
        ask = _ask(agent, present_session)
        services.ask_answer(ask_id=ask.id, answers=answer_for(), surface="web")
    events = list(OutboxEvent.objects.order_by("seq"))
    assert len(events) == 3
    OutboxEvent.objects.filter(pk=events[0].pk).update(delivered_at=timezone.now(), delivered_via="webhook", attempts=2)
    OutboxEvent.objects.filter(pk=events[1].pk).update(failed_at=timezone.now(), attempts=9)
    OutboxEvent.objects.filter(pk=events[2].pk).update(created_at=timezone.now() - timedelta(minutes=10))
    samples = scrape()
    assert value(samples, "askcards_webhook_deliveries_total", outcome="delivered") == 1
    assert value(samples, "askcards_webhook_deliveries_total", outcome="given_up") == 1
    assert value(samples, "askcards_webhook_attempts_total") == 11
    assert value(samples, "askcards_webhook_backlog") == 1
    assert 600 <= value(samples, "askcards_webhook_backlog_oldest_seconds") < 700


def test_card_sync_backlog_and_failing_cards_by_platform(token, agent):
    bot = services.bot_add(platform="dingtalk", app_id="ding_m", app_secret="s")
    for version, synced, attempts in ((3, 1, 0), (2, 1, 4), (1, 1, 0)):
        CardMessage.objects.create(platform=Bot.Platform.DINGTALK, bot=bot, message_id=f"ask_{version}{attempts}",
                                   version=version, synced_version=synced, sync_attempts=attempts)
    samples = scrape()
    assert value(samples, "askcards_card_sync_backlog", platform="dingtalk") == 2
    assert value(samples, "askcards_card_sync_failing", platform="dingtalk") == 1


def test_panel_sockets_are_the_fresh_presence_rows_of_every_process(token):
    PanelPresence.objects.create(username="alice", channel_name="a")
    PanelPresence.objects.create(username="bob", channel_name="b", last_seen=timezone.now() - timedelta(hours=1))
    assert value(scrape(), "askcards_panel_sockets") == 1


# ------------------------------------------------------------------------------- in the process


def test_a_refused_callback_counts_its_cause(token):
    samples = scrape()
    before = value(samples, "askcards_callback_refusals_total", platform="feishu", cause="unknown_app")
    timed = value(samples, "askcards_callback_seconds_count", platform="feishu")
    response = Client().post("/callbacks/feishu/cli_nobody/", data=b"{}", content_type="application/json")
    assert response.status_code == 404
    samples = scrape()
    assert value(samples, "askcards_callback_refusals_total", platform="feishu", cause="unknown_app") == before + 1
    assert value(samples, "askcards_callback_seconds_count", platform="feishu") == timed + 1


@pytest.mark.django_db(transaction=True)  # the callback runs on the pool's own connection
def test_a_dingtalk_callback_with_a_bad_signature_counts_as_verification(token):
    services.bot_add(platform="dingtalk", app_id="ding_sig", app_secret="s", api_secret="api")
    before = value(scrape(), "askcards_callback_refusals_total", platform="dingtalk", cause="verification")
    response = Client().post("/callbacks/dingtalk/ding_sig/", data=b"{}", content_type="application/json",
                             HTTP_X_DDPAAS_SIGNATURE_TIMESTAMP="1", HTTP_X_DDPAAS_SIGNATURE="forged")
    assert response.status_code == 401
    assert value(scrape(), "askcards_callback_refusals_total", platform="dingtalk", cause="verification") == before + 1


def test_parked_requests_are_counted_while_they_wait(token):
    before = value(scrape(), "askcards_parked_waiters", kind="rest")
    with metrics.parked("rest"):
        assert value(scrape(), "askcards_parked_waiters", kind="rest") == before + 1
    assert value(scrape(), "askcards_parked_waiters", kind="rest") == before


def test_a_failed_card_push_is_counted(token):
    bot = services.bot_add(platform="feishu", app_id="cli_push", app_secret="s")
    message = CardMessage.objects.create(platform=Bot.Platform.FEISHU, bot=bot, message_id="om_1", version=1)
    labels = {"platform": "feishu", "outcome": "retry"}
    before = value(scrape(), "askcards_card_push_failures_total", **labels)
    sync.card_push_failed(message, "HTTP 503", version=1, started=timezone.now(), gave_up=False)
    assert value(scrape(), "askcards_card_push_failures_total", **labels) == before + 1


def test_multiprocess_mode_sums_the_counters_of_every_process(token, tmp_path, monkeypatch):
    """Two other processes count refusals in PROMETHEUS_MULTIPROC_DIR; a scrape here sums them."""
    code = ("import django; django.setup(); from askcards.operators import metrics; "
            "metrics.callback_refused('dingtalk', 'replayed')")
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "tests.settings"}
    for _ in range(2):
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, timeout=120)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    samples = scrape()
    assert value(samples, "askcards_callback_refusals_total", platform="dingtalk", cause="replayed") == 2
    assert ("askcards_webhook_backlog", ()) in samples  # the database's figures still come along


# ------------------------------------------------------------------------------------ JSON logs


def _json_line(record_args: dict) -> dict:
    record = logging.LogRecord("askcards.test", logging.WARNING, __file__, 1, "ask %s refused", ("q_1",), None)
    record.__dict__.update(record_args)
    return json.loads(JsonFormatter().format(record))


def test_json_log_line_has_time_level_logger_and_message():
    line = _json_line({})
    assert (line["level"], line["logger"], line["message"]) == ("WARNING", "askcards.test", "ask q_1 refused")
    assert line["time"].endswith("Z")


def test_json_log_line_never_carries_the_request_it_was_given():
    class Request:
        headers = {"Authorization": f"Bearer {TOKEN}"}

        def __repr__(self):
            return f"<Request Authorization: Bearer {TOKEN}>"

    line = _json_line({"request": Request(), "status_code": 404})
    assert line["status_code"] == 404
    assert TOKEN not in json.dumps(line)


def test_json_log_line_carries_the_traceback():
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("askcards.test", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    line = json.loads(JsonFormatter().format(record))
    assert "ValueError: boom" in line["exc"]


def test_log_format_setting_switches_the_console_to_json(tmp_path):
    code = "import django, logging; django.setup(); logging.getLogger('askcards.x').warning('hello %s', 'there')"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings", "ASKCARDS_LOG_FORMAT": "json",
           "ASKCARDS_DATA_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert {"level": "WARNING", "logger": "askcards.x", "message": "hello there"}.items() <= lines[-1].items()


def test_log_format_setting_refuses_an_unknown_format(tmp_path):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings", "ASKCARDS_LOG_FORMAT": "xml",
           "ASKCARDS_DATA_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0 and "ASKCARDS_LOG_FORMAT must be plain or json" in done.stderr


def test_a_missing_multiprocess_directory_is_a_configuration_error(tmp_path, monkeypatch):
    from askcards.runtime import checks

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "missing"))
    assert "askcards.E003" in [problem.id for problem in checks.askcards_settings(None)]
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    assert "askcards.E003" not in [problem.id for problem in checks.askcards_settings(None)]


def test_a_database_failure_still_serves_the_process_metrics(token, monkeypatch):
    from django.db import OperationalError

    from askcards import selectors

    def down(*args, **kwargs):
        raise OperationalError("database is locked")

    monkeypatch.setattr(selectors, "metrics_asks", down)
    samples = scrape()
    assert value(samples, "askcards_metrics_database_up") == 0
    assert ("askcards_asks_created_total", (("platform", "web"), ("tool", "ask_user_questions"))) not in samples
    assert any(name == "askcards_callback_seconds_count" for name, _ in samples)


def test_the_database_figures_are_marked_up(token):
    assert value(scrape(), "askcards_metrics_database_up") == 1
