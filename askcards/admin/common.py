"""What every askcards admin page shares: long lists counted cheaply, read-only inlines, the
operator's time zone and styles, the audit actor of an operator's action."""
from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.utils import flatten
from django.core.paginator import Paginator
from django.db import models
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.utils.functional import cached_property

from .. import selectors, services
from ..models import Ask


class EstimatedCountPaginator(Paginator):
    """Pages of a list whose table may hold millions of rows: the count behind the page links is
    PostgreSQL's estimate there (``selectors.changelist_count``), never a ``COUNT(*)`` over the
    whole table; each page itself is the exact rows."""

    @cached_property
    def count(self) -> int:
        if not isinstance(self.object_list, QuerySet):  # a list handed over by other code
            return len(self.object_list)
        return selectors.changelist_count(self.object_list)


class LargeListAdmin(admin.ModelAdmin):
    """For the lists of the tables that grow with use (asks, sessions, audit, outbox): no full
    count (the "N total" link would count every row) and an estimated page count. Each filter
    these lists offer, and their ordering, is served by an index (tests/admin/test_large_lists.py
    checks the plans on PostgreSQL)."""

    paginator = EstimatedCountPaginator
    show_full_result_count = False


def count_of(related: QuerySet[Any], key: str) -> Coalesce:
    """A correlated ``COUNT`` of ``related`` rows whose ``key`` is the listed row: evaluated for the
    page's rows only, where a join and GROUP BY would aggregate the whole table before the LIMIT."""
    counted = related.filter(**{key: OuterRef("pk")}).order_by().values(key).annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(counted), 0)


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return flatten(self.fields or ())

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class OperatorTimeZoneMedia:
    """Every askcards admin page sets the operator's time zone cookie (see askcards.operators.timezones)
    and has the ask page's and dashboard's styles."""

    js = ("askcards/admin/timezone.js",)
    css = {"all": ("askcards/admin/admin.css",)}


def operator(request: HttpRequest) -> str:
    """The audit actor of an operator's action."""
    return f"operator:{request.user.get_username()}"


def operator_cancel(request: HttpRequest, ask: Ask) -> bool:
    """The list action and the ask page's button: the same service call, reason and actor."""
    return services.ask_cancel(ask=ask, reason=Ask.Reason.BY_OPERATOR, actor=operator(request))


def url_scheme_formfield(field: models.Field, **kwargs: Any) -> forms.Field | None:
    # Django 6 makes https the scheme a bare host gets; opt in now (and silence the warning).
    if isinstance(field, models.URLField):
        kwargs.setdefault("assume_scheme", "https")
    return field.formfield(**kwargs)
