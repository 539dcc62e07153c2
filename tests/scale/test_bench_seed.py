"""The seeder's bulk rows (tests.bench.seed, through bench_scale's bulk_seed: the benchmark's and the
tests' at size) are rows the service itself reads as its own: if the schema moves on and the
seeding SQL does not, the benchmark would measure a database the service cannot use."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.bench import bench_scale, seed
from tests.scale import harness

pytestmark = pytest.mark.postgres

CHECK = r"""
import json, django
django.setup()
from collections import Counter
from django.db.models import Count, F
from askcards import selectors, services
from askcards.models import Agent, Ask, AskEvent, CardMessage, OutboxEvent, Respondent, Session

agent = Agent.objects.get(name="bench")
asks = Ask.objects.filter(agent=agent)
shown = {}
for field, values in (("status", Ask.Status.values), ("platform", Session.Platform.values),
                      ("tool", ["ask_user_questions", "dingtalk_ask_user_question"])):
    for value in values:  # model validation and the public shape of one ask of each seeded value
        ask = asks.filter(**{field: value}).first()
        if ask is not None:
            ask.full_clean()
            shown[f"{field}={value}"] = selectors.ask_data(ask)["status"] == ask.status
page = [selectors.ask_data(ask) for ask in selectors.ask_list(agent=agent)[:50]]
events = [selectors.event_data(event) for event in selectors.events_after(agent=agent, after=0, limit=500)]
print(json.dumps({
    "statuses": dict(Counter(asks.values_list("status", flat=True))),
    "shown": shown,
    "platforms_match": not asks.exclude(platform=F("session__platform")).exists(),
    "respondents_per_ask": sorted(set(asks.annotate(n=Count("respondents")).values_list("n", flat=True))),
    "audit_rows": AskEvent.objects.count(),
    "seqs": [event["seq"] for event in events],
    "event_seq": agent.event_seq,
    "page": len(page),
    "page_statuses": [row["status"] for row in page],
    "session_cards": CardMessage.objects.filter(progress_card__session__in=Session.objects.all()).count(),
    "expired_now": services.expire_due(),
    "purged_now": services.purge_answers(),
    "purged_before": asks.filter(answers_purged_at__isnull=False).count(),
    "purged_results": asks.filter(answers_purged_at__isnull=False, result__purged=True).count(),
    "respondent_answers": Respondent.objects.filter(answers__isnull=False).count(),
    "answered_unpurged": asks.filter(status="answered", answers_purged_at__isnull=True).count(),
    "outbox": OutboxEvent.objects.count(),
}))
"""


def seeded_database(tmp_path, template: str, closed: int, pending: int, sessions: int) -> harness.PgDatabase:
    db = harness.create_database(tmp_path, template=template)
    try:
        harness.manage(db, "askcards_bot", "add", "feishu", "--app-id", bench_scale.APP_ID, "--app-secret", "s",
                       "--verification-token", "t", "--encrypt-key", "k", "--base-url", "http://127.0.0.1:9")
        harness.manage(db, "askcards_agent", "create", bench_scale.AGENT, "--json")
        bench_scale.bulk_seed(f"{harness.ADMIN_DSN.rsplit('/', 1)[0]}/{db.name}", closed, pending, sessions)
    except BaseException:
        harness.drop_database(db.name)
        raise
    return db


def run_check(db: harness.PgDatabase, script: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", script], cwd=harness.PROJECT_DIR, env=db.env,
                          capture_output=True, text=True, timeout=harness.SUBPROCESS_TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_bulk_rows_are_the_services_own(tmp_path, pg_template):
    db = seeded_database(tmp_path, pg_template, 300, 40, 100)
    try:
        found = run_check(db, CHECK)
    finally:
        harness.drop_database(db.name)

    # 300 closed asks in the seeder's mix of statuses, 40 pending; one respondent each.
    assert found["statuses"] == {**seed.status_counts(300), "pending": 40}
    assert len(found["statuses"]) == 6  # every status but reserved, already at this size
    assert found["respondents_per_ask"] == [1]
    # Three audit rows per closed ask and a fourth for every 50th (asks 50, 150, 250), two per pending.
    assert found["audit_rows"] == 300 * 3 + 3 + 40 * 2
    # One delivered ask.closed event per closed ask, numbered 1..300 as the agent's counter says.
    assert found["outbox"] == 300 and found["seqs"] == list(range(1, 301)) and found["event_seq"] == 300
    # The agent's list reads newest first: the pending asks (the last two hours) before the closed.
    assert found["page"] == 50 and found["page_statuses"][:40] == ["pending"] * 40
    assert "pending" not in found["page_statuses"][40:]
    assert found["session_cards"] == 80  # the Feishu sessions are the bot's chats, 80 of the 100
    # Every status, platform and tool the seeder writes is one the model and the API's shape take;
    # an ask's platform is its session's.
    assert found["shown"] == {f"{field}={value}": True for field, values in (
        ("status", ["pending", "answered", "cancelled", "expired", "invalidated", "failed"]),
        ("platform", ["feishu", "dingtalk", "wechat", "web"]),
        ("tool", ["ask_user_questions", "dingtalk_ask_user_question"])) for value in values}
    assert found["platforms_match"]
    # Nothing due: deadlines are a day away, answers past retention were purged when seeded.
    assert found["expired_now"] == 0 and found["purged_now"] == 0
    assert 0 < found["purged_before"] < 300 and found["purged_results"] == found["purged_before"]
    assert 0 < found["respondent_answers"] == found["answered_unpurged"]

