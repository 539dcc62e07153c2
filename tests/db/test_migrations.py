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


def migrate_latest() -> None:
    """Back to the schema the other tests expect (the rows go with the test's flush)."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes("askcards"))


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
        migrate_latest()


@pytest.mark.django_db(transaction=True)
def test_0010_grants_each_bot_to_the_agents_that_already_have_sessions_on_it():
    """An upgrade breaks nobody: an agent keeps the bots its sessions use, and only those."""
    apps = migrate(("askcards", "0009_callback_receipt_no_created_index"))
    try:
        Agent, Bot, Session = (apps.get_model("askcards", name) for name in ("Agent", "Bot", "Session"))
        a, b, idle = (Agent.objects.create(name=name, key_hash=name * 64, key_hint=name) for name in "abc")
        feishu = Bot.objects.create(platform="feishu", app_id="cli_old", base_url="https://open.feishu.cn")
        dingtalk = Bot.objects.create(platform="dingtalk", app_id="ding_old", base_url="https://api.dingtalk.com")
        Bot.objects.create(platform="feishu", app_id="cli_unused", base_url="https://open.feishu.cn")
        for agent, bot, key in ((a, feishu, "a1"), (a, feishu, "a2"), (a, dingtalk, "a3"), (b, dingtalk, "b1")):
            Session.objects.create(agent=agent, key=key, platform=bot.platform, bot=bot)
        Session.objects.create(agent=idle, key="web", platform="web")
        apps = migrate(("askcards", "0010_agent_bot_grants"))
        Agent = apps.get_model("askcards", "Agent")
        granted = {agent.name: sorted(bot.app_id for bot in agent.bots.all()) for agent in Agent.objects.all()}
        assert granted == {"a": ["cli_old", "ding_old"], "b": ["ding_old"], "c": []}
    finally:
        migrate_latest()
