"""A unique row read as a plain ``LIMIT 1`` (every selector module's helper)."""
from __future__ import annotations

from typing import Any

from django.db.models import QuerySet


def unique_row(queryset: QuerySet) -> Any:
    """The row a unique lookup finds, or None: a plain LIMIT 1, without ``first()``'s ORDER BY."""
    return next(iter(queryset[:1]), None)
