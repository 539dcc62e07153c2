"""System checks with hints for misconfiguration (run by every manage.py command)."""
from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, Warning, register


@register()
def askcards_settings(app_configs, **kwargs):
    problems = []
    engine = settings.DATABASES["default"]["ENGINE"]
    layer = settings.CHANNEL_LAYERS["default"]["BACKEND"]
    if not engine.endswith("sqlite3") and "InMemory" in layer:
        problems.append(
            Warning(
                "A shared database is configured but the channel layer is in-memory.",
                hint="Set REDIS_URL so long-polls and panels in every process are woken; with the in-memory "
                "layer only the process that made a change wakes its own waiters (others notice at their timeout).",
                id="askcards.W001",
            )
        )
    if not engine.endswith("sqlite3") and not settings.SECRET_KEY_FROM_ENV:
        problems.append(
            Warning(
                "ASKCARDS_SECRET_KEY is not set; a key generated in the data directory is used.",
                hint="Every process of a scale-out deployment must share one ASKCARDS_SECRET_KEY: it "
                "encrypts bot secrets at rest.",
                id="askcards.W002",
            )
        )
    if settings.ASKCARDS_PUBLIC_URL and not settings.ASKCARDS_PUBLIC_URL.startswith(("http://", "https://")):
        problems.append(
            Error(
                f"ASKCARDS_PUBLIC_URL must be an absolute http(s) URL, got {settings.ASKCARDS_PUBLIC_URL!r}.",
                hint="For example ASKCARDS_PUBLIC_URL=https://askcards.example.com",
                id="askcards.E001",
            )
        )
    return problems
