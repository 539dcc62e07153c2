"""/metrics with ASKCARDS_METRICS_TOKEN (issue 13.4): only the exact Bearer token reads the
metrics, and the comparison takes constant time (``hmac.compare_digest``), so response timing
reveals nothing of the token."""
from __future__ import annotations

import hmac
from unittest import mock

import pytest
from django.test import Client

from askcards.operators import metrics

pytestmark = pytest.mark.django_db

TOKEN = "s3cr3t-metrics-token-0123456789abcdef"


@pytest.fixture(autouse=True)
def token(settings):
    settings.ASKCARDS_METRICS_TOKEN = TOKEN
    settings.ASKCARDS_METRICS_ALLOW = ()


@pytest.mark.parametrize(
    "authorization",
    [
        "",
        "Bearer",
        "Bearer ",
        "Bearer wrong",
        f"Bearer {TOKEN[:-1]}",  # a prefix
        f"Bearer {TOKEN}x",  # longer
        f"Bearer {TOKEN.upper()}",
        f"Basic {TOKEN}",
        TOKEN,
        f"Token {TOKEN}",
    ],
)
def test_anything_but_the_exact_bearer_token_is_refused(authorization):
    response = Client().get("/metrics", HTTP_AUTHORIZATION=authorization)
    assert response.status_code == 401
    assert b"askcards_" not in response.content and TOKEN.encode() not in response.content


def test_the_exact_token_reads_the_metrics():
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200 and b"askcards_asks_created_total" in response.content


def test_the_token_is_compared_in_constant_time():
    with mock.patch("askcards.operators.metrics.hmac.compare_digest", wraps=hmac.compare_digest) as compare:
        assert metrics.refusal(authorization="Bearer wrong", remote_addr="127.0.0.1") == 401
        assert metrics.refusal(authorization=f"Bearer {TOKEN}", remote_addr="127.0.0.1") is None
    assert [call.args[1] for call in compare.call_args_list] == [TOKEN.encode(), TOKEN.encode()]


def test_the_token_is_never_in_a_refusal_or_the_metrics(caplog):
    refused = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong")
    served = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert TOKEN.encode() not in refused.content + served.content
    assert TOKEN not in caplog.text


def test_a_post_is_not_a_scrape():
    assert Client().post("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 405
