"""A process that dies right after an ask's ending commits, before any after-commit work runs,
still leaves the DingTalk card to converge: the card is marked for another PUT inside the ask's
own transaction (``DingTalkSurface.mark``), so the worker's card sync PUTs the ending later."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.db import connection

from askcards.models import Ask, CardMessage
from askcards.worker import Worker
from tests.serving import ROOT

from .integration import QUESTIONS, create, sync_cards

pytestmark = pytest.mark.django_db(transaction=True)

# Ends the ask in another process on this test's database and dies the moment that commits: the
# first on-commit hook (registered before the ending's own) is os._exit, so the wake-ups and the
# surfaces' show/withdraw never run.
CRASH = """
import json, os, sys

import django
from django.conf import settings

settings.DATABASES["default"].update(json.loads(os.environ["ASKCARDS_CRASH_TEST_DB"]))
django.setup()

from django.db import transaction

from askcards import services
from askcards.models import Ask

ask = Ask.objects.select_related("session__bot", "agent").get(pk=sys.argv[1])
with transaction.atomic():
    transaction.on_commit(lambda: os._exit(0))
    if sys.argv[2] == "cancel":
        services.ask_cancel(ask=ask, actor="agent:crash-test")
    else:
        services.dingtalk_click(ask=ask, user_id="staff_a", action="submit", form={"answer_0": "生产"})
print("after-commit work ran")
"""


def end_in_a_process_that_dies_at_commit(ask: Ask, ending: str) -> None:
    db = connection.settings_dict
    shared = {key: db[key] for key in ("ENGINE", "USER", "PASSWORD", "HOST", "PORT", "OPTIONS")}
    env = {**os.environ, "ASKCARDS_CRASH_TEST_DB": json.dumps({**shared, "NAME": str(db["NAME"])})}
    done = subprocess.run([sys.executable, "-c", CRASH, ask.pk, ending], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "after-commit work ran" not in done.stdout


@pytest.mark.parametrize(
    ("ending", "status", "shown"),
    [
        ("cancel", "cancelled", {"card_status": "cancelled", "question_desc": "已取消。", "form_btn_text": "已取消"}),
        ("submit", "answered", {"card_status": "submitted", "question_desc": "已选择：生产。", "form_btn_text": "已提交"}),
    ],
)
def test_card_shows_the_ending_after_a_crash_between_commit_and_after_commit_work(
    agent, session, fake, ending, status, shown
):
    outcome, details = create(agent, session, {"questions": QUESTIONS})
    sync_cards()  # the activation's render is done: only the ending can make the card due again
    card = details["outTrackId"]

    end_in_a_process_that_dies_at_commit(outcome.ask, ending)

    assert Ask.objects.get(pk=outcome.ask.pk).status == status
    assert fake.card_params(card)["card_status"] == "pending"  # nothing reached DingTalk before the crash
    CardMessage.objects.update(next_sync_at=None)  # the earlier push's 200 ms pacing is not under test
    assert Worker().card_sync() == 1
    params = fake.card_params(card)
    assert {key: params[key] for key in shown} == shown
