from __future__ import annotations

import pytest
from django.core.cache import cache

from askcards.surfaces.feishu.client import FeishuClient
from tests.fakes.feishu import FakeClock, FakeFeishu


@pytest.fixture(autouse=True)
def private_cache(settings):
    """Tenant tokens live in the Django cache: every test gets an empty in-process one (never a
    shared Redis, which clearing would wipe for everyone else)."""
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": "askcards-feishu-tests"}}
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fake_feishu(clock):
    with FakeFeishu(clock=clock.now) as fake:
        yield fake


@pytest.fixture
def client(fake_feishu, clock) -> FeishuClient:
    """A client whose backoff advances the fake clock instead of sleeping."""
    return FeishuClient(fake_feishu.app_id, fake_feishu.app_secret, fake_feishu.base_url,
                        timeout=2.0, sleep=clock.sleep, clock=clock.now)
