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
