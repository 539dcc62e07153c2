from __future__ import annotations

import pytest
from django.core.cache import cache

from askcards.surfaces.dingtalk.client import DingTalkClient
from tests.fakes.dingtalk import FakeDingTalk


@pytest.fixture(autouse=True)
def empty_token_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture(autouse=True)
def dingtalk_surface(settings):
    """DingTalk tests run with the DingTalk surface alone (not the recording stand-in)."""
    settings.ASKCARDS_SURFACES = ["askcards.surfaces.dingtalk.surface.DingTalkSurface"]


@pytest.fixture
def bot(fake):
    from tests.dingtalk.integration import make_bot

    return make_bot(fake)


@pytest.fixture
def session(agent, bot):
    from tests.dingtalk.integration import make_session

    return make_session(agent, bot)


@pytest.fixture
def fake():
    with FakeDingTalk() as server:
        yield server


class Sleeps(list):
    """Stands in for time.sleep: records each delay instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def client(fake, sleeps) -> DingTalkClient:
    return DingTalkClient(fake.client_id, fake.client_secret, base_url=fake.base_url, timeout=2.0, sleep=sleeps)
