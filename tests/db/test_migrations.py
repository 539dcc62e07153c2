"""Migrations that change existing rows: run from the previous state on rows made there."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

BEFORE, AFTER = ("askcards", "0007_admin_list_indexes"), ("askcards", "0008_ask_platform_and_list_indexes")


def migrate(target):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([target])
    return executor.loader.project_state([target]).apps


@pytest.mark.django_db(transaction=True)
def test_0008_gives_every_existing_ask_its_sessions_platform(monkeypatch):
    import importlib

    fill = importlib.import_module("askcards.migrations.0008_ask_platform_and_list_indexes")
    monkeypatch.setattr(fill, "FILL_BATCH", 3)  # several batches of the 8 asks
    apps = migrate(BEFORE)
    try:
        Agent, Session, Ask = (apps.get_model("askcards", name) for name in ("Agent", "Session", "Ask"))
        agent = Agent.objects.create(name="old", key_hash="h" * 64, key_hint="ak_old")
        sessions = {platform: Session.objects.create(agent=agent, key=f"old/{platform}", platform=platform)
                    for platform in ("feishu", "dingtalk", "wechat", "web")}
        now = timezone.now()
        made = {
            Ask.objects.create(agent=agent, session=sessions[platform], tool="ask_user_questions",
                               deadline=now + timedelta(hours=1)).pk: platform
            for platform in ("feishu", "dingtalk", "wechat", "web", "web", "feishu", "web", "dingtalk")
        }
        apps = migrate(AFTER)
        Ask = apps.get_model("askcards", "Ask")
        assert dict(Ask.objects.values_list("pk", "platform")) == made
    finally:
        migrate(AFTER)  # the schema the other tests expect (the rows go with the test's flush)
