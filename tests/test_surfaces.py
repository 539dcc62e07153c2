"""The surface seam: every configured surface subclasses ``Surface``, and a hook a surface leaves
out is the base's no-op, so the lifecycle runs on a surface that only says whom it reaches."""
from __future__ import annotations

import pytest
from django.utils import timezone

from askcards import services, surfaces
from askcards.surfaces.base import Surface

from .conftest import QUESTIONS


class ReachOnly(Surface):
    name = "reach-only"

    def reachable(self, session, tool: str) -> bool:
        return True


class NotASurface:
    name = "not-a-surface"


def test_a_surface_with_only_reachable_carries_an_ask_from_call_to_cancel(settings, agent, web_session):
    settings.ASKCARDS_SURFACES = ["tests.test_surfaces.ReachOnly"]
    outcome = services.tool_call(agent=agent, session=web_session, name="ask_user_questions",
                                 arguments={"questions": QUESTIONS})
    assert (outcome.status, outcome.ask.surfaces) == ("pending", ["reach-only"])

    assert services.ask_cancel(ask=outcome.ask, actor="agent:test")
    surfaces.result_undeliverable(outcome.ask)
    assert surfaces.sync_due(timezone.now(), surfaces.SyncReport()) == 0
    outcome.ask.refresh_from_db()
    assert outcome.ask.status == "cancelled"


def test_a_configured_surface_that_is_not_a_surface_is_refused(settings, db):
    settings.ASKCARDS_SURFACES = ["tests.test_surfaces.NotASurface"]
    with pytest.raises(TypeError, match="NotASurface .* must subclass askcards.surfaces.base.Surface"):
        surfaces.all_surfaces()


class OtherFeishu(Surface):
    """A configured surface standing in for Feishu's: the registry gives it for Feishu bots."""

    name = "other-feishu"
    platform = "feishu"

    def client(self, bot, *, timeout: float, max_attempts: int, backoff: float):
        return ("other-feishu", bot.app_id, timeout, max_attempts, backoff)


def test_a_bots_platform_client_comes_from_the_surface_registry(settings, db):
    from askcards.models import Bot
    from askcards.surfaces.dingtalk.client import DingTalkClient
    from askcards.surfaces.feishu.client import FeishuClient

    settings.ASKCARDS_SURFACES = ["tests.test_surfaces.ReachOnly"]  # a platform left out still has its client
    feishu = Bot(platform="feishu", app_id="cli_x", app_secret="s", base_url="https://open.feishu.cn")
    dingtalk = Bot(platform="dingtalk", app_id="ding_x", app_secret="s", base_url="https://api.dingtalk.com")
    assert isinstance(surfaces.for_platform("feishu").client(feishu, timeout=1, max_attempts=2, backoff=0.2),
                      FeishuClient)
    assert isinstance(surfaces.for_platform("dingtalk").client(dingtalk, timeout=1, max_attempts=2, backoff=0.2),
                      DingTalkClient)
    with pytest.raises(LookupError, match="no surface serves platform 'web'"):
        surfaces.for_platform("web")

    settings.ASKCARDS_SURFACES = ["tests.test_surfaces.OtherFeishu"]  # the configured surface comes first
    assert surfaces.for_platform("feishu").client(feishu, timeout=1, max_attempts=2, backoff=0.2) == (
        "other-feishu", "cli_x", 1, 2, 0.2)
