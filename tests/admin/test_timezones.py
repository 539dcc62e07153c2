"""The operator's time zone: a browser zone name from the cookie, for admin pages only."""
from __future__ import annotations

import asyncio

import pytest
from django.http import HttpResponse
from django.test import RequestFactory
from django.utils import timezone

from askcards.operators.timezones import COOKIE, OperatorTimeZoneMiddleware, zone_named


@pytest.mark.parametrize("name", ["Asia/Shanghai", "Asia%2FShanghai"])
def test_a_browser_zone_name_is_a_zone(name):
    assert str(zone_named(name)) == "Asia/Shanghai"


@pytest.mark.parametrize("name", ["", "Mars/Olympus_Mons", "../../etc/passwd", "/etc/localtime", "A" * 200])
def test_anything_else_is_no_zone(name):
    assert zone_named(name) is None


def request(path: str):
    made = RequestFactory().get(path)
    made.COOKIES[COOKIE] = "Asia/Shanghai"
    return made


def zone_seen_sync(path: str) -> str:
    seen = []

    def view(r):
        seen.append(timezone.get_current_timezone_name())
        return HttpResponse()

    OperatorTimeZoneMiddleware(view)(request(path))
    return seen[0]


def zone_seen_async(path: str) -> str:
    seen = []

    async def view(r):
        seen.append(timezone.get_current_timezone_name())
        return HttpResponse()

    asyncio.run(OperatorTimeZoneMiddleware(view)(request(path)))
    return seen[0]


@pytest.mark.parametrize("run", [zone_seen_sync, zone_seen_async])
def test_admin_requests_run_in_the_cookies_zone(run):
    assert run("/admin/askcards/ask/") == "Asia/Shanghai"
    assert timezone.get_current_timezone_name() == "UTC"  # and only while they run


@pytest.mark.parametrize("run", [zone_seen_sync, zone_seen_async])
def test_other_requests_keep_the_servers_zone(run):
    assert run("/api/v1/asks") == "UTC"
