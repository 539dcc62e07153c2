"""System checks with hints for misconfiguration (run by every manage.py command; the database
check below by ``check --database default``, and by serve and askcards_worker at start)."""
from __future__ import annotations

import os

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.db import connections
from django.db.models import TextField
from django.db.models.functions import Cast

from askcards import crypto


@register()
def askcards_settings(app_configs, **kwargs):
    problems = []
    engine = settings.DATABASES["default"]["ENGINE"]
    if not engine.endswith("sqlite3") and not settings.REDIS_URL:
        problems.append(
            Warning(
                "A shared database is configured but REDIS_URL is not set.",
                hint="Set REDIS_URL so long-polls and panels in every process are woken; without it only the "
                "process that made a change wakes its own waiters (others notice at their timeout).",
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
    multiprocess_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")
    if multiprocess_dir and not (os.path.isdir(multiprocess_dir) and os.access(multiprocess_dir, os.W_OK)):
        problems.append(
            Error(
                f"PROMETHEUS_MULTIPROC_DIR={multiprocess_dir!r} is not a writable directory.",
                hint="Create it (empty it at each deployment's start) and give every askcards process the same "
                "value, or unset it to report each process's own counters.",
                id="askcards.E003",
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


def _undecryptable(alias: str, model, label_fields: tuple[str, ...], secret_fields: tuple[str, ...]) -> list[str]:
    """The rows of ``model`` holding a secret the current key cannot decrypt, as "<label fields>
    (<secret fields>)". Reads the stored ciphertexts as text (the model field would decrypt them,
    and raise)."""
    connection = connections[alias]
    table = model._meta.db_table
    if table not in connection.introspection.table_names():
        return []  # not migrated yet (e.g. check during the first migrate)
    with connection.cursor() as cursor:
        # `migrate` runs this check before migrating: a secret column added by a pending migration
        # is not there yet (nothing stored in it either), so only the columns present are read.
        present = {column.name for column in connection.introspection.get_table_description(cursor, table)}
    secret_fields = tuple(name for name in secret_fields if model._meta.get_field(name).column in present)
    stored = (Cast(name, output_field=TextField()) for name in secret_fields)
    rows = model._base_manager.using(alias).order_by().values_list(*label_fields, *stored)
    found = []
    for row in rows:
        labels, tokens = row[: len(label_fields)], row[len(label_fields) :]
        bad = []
        for name, token in zip(secret_fields, tokens):
            if not token:
                continue
            try:
                crypto.decrypt(token)
            except crypto.UndecryptableSecret:
                bad.append(name)
        if bad:
            found.append(f"{' '.join(map(str, labels))} ({', '.join(bad)})")
    return found


@register(Tags.database)
def askcards_stored_secrets(app_configs, databases=None, **kwargs):
    """Every stored secret must decrypt with the current key; otherwise say which rows (never the
    secret) before callbacks start failing."""
    if not databases:
        return []
    from askcards.models import Agent, Bot

    problems = []
    for alias in databases:
        bot_secrets = ("app_secret", "verification_token", "encrypt_key", "api_secret")
        bots = _undecryptable(alias, Bot, ("platform", "app_id"), bot_secrets)
        found = [row.replace(" ", " bot ", 1) for row in bots]  # "feishu bot cli_x (app_secret)"
        found += [f"agent {row}" for row in _undecryptable(alias, Agent, ("name",), ("webhook_secret",))]
        if found:
            problems.append(
                Error(
                    f"Stored secrets cannot be decrypted with the current ASKCARDS_SECRET_KEY: {'; '.join(found)}.",
                    hint="Set ASKCARDS_SECRET_KEY to the key they were saved with (or restore the data "
                    "directory's secret_key file). If that key is lost, delete these bots and agents and "
                    "add them again (askcards_bot add, askcards_agent create). Until then these bots' "
                    "callbacks answer 503.",
                    id="askcards.E002",
                    obj=alias,
                )
            )
    return problems


@register(Tags.database)
def askcards_dingtalk_http_bots(app_configs, databases=None, **kwargs):
    """An active DingTalk bot in HTTP callback mode without an api secret refuses every card click
    (its callbacks cannot be verified): say so before the first click fails. Reads no secret: an
    unset secret is stored as the empty string."""
    if not databases:
        return []
    from askcards.models import Bot

    problems = []
    for alias in databases:
        if Bot._meta.db_table not in connections[alias].introspection.table_names():
            continue
        unsigned = list(
            Bot._base_manager.using(alias)
            .filter(platform=Bot.Platform.DINGTALK, callback_mode=Bot.CallbackMode.HTTP, is_active=True, api_secret="")
            .order_by("app_id")
            .values_list("app_id", flat=True)
        )
        if unsigned:
            problems.append(
                Warning(
                    f"DingTalk bots in HTTP callback mode without an api secret: {', '.join(unsigned)}. Every "
                    "card click they receive is refused (401): DingTalk signs HTTP callbacks with the api secret.",
                    hint="Set it: manage.py askcards_bot update dingtalk <client id> --api-secret …, or switch the "
                    "bot to Stream mode (--callback stream) and run askcards_dingtalk_stream.",
                    id="askcards.W003",
                    obj=alias,
                )
            )
    return problems
