"""The operator's time zone on admin pages.

Stored times are UTC and the server's ``TIME_ZONE`` stays what it is (logs, the API's ``Z``
times). An operator reads admin pages in their own zone: the admin's ``timezone.js`` puts the
browser's IANA zone name in the ``askcards_tz`` cookie, and this middleware activates it for
requests under the admin only. A name the server's time zone database does not know is ignored.
"""
from __future__ import annotations

import functools
import zoneinfo
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

COOKIE = "askcards_tz"
MAX_NAME = 64


@functools.cache
def _known_zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def zone_named(name: str | None) -> zoneinfo.ZoneInfo | None:
    """The zone an IANA name (``Asia/Shanghai``, or URL-encoded ``Asia%2FShanghai``) names, or
    None for anything else."""
    name = unquote(name) if name else name
    if not name or len(name) > MAX_NAME or name not in _known_zones():
        return None
    return zoneinfo.ZoneInfo(name)


@functools.cache
def _admin_prefix() -> str:
    try:
        return reverse("admin:index")
    except NoReverseMatch:
        return "/admin/"


class OperatorTimeZoneMiddleware:
    """Admin requests run in the zone of their ``askcards_tz`` cookie (when it names one)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def _zone(self, request: HttpRequest) -> zoneinfo.ZoneInfo | None:
        if not request.path.startswith(_admin_prefix()):
            return None
        return zone_named(request.COOKIES.get(COOKIE))

    def __call__(self, request: HttpRequest) -> HttpResponse | Awaitable[HttpResponse]:
        if self.is_async:
            return self.__acall__(request)
        zone = self._zone(request)
        if zone is None:
            return self.get_response(request)
        with timezone.override(zone):
            return self.get_response(request)

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        zone = self._zone(request)
        if zone is None:
            return await self.get_response(request)
        with timezone.override(zone):
            return await self.get_response(request)
