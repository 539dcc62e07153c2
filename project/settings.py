"""askcards settings: everything comes from the environment.

Embedded default (no variables set): SQLite file under ``ASKCARDS_DATA_DIR`` and the in-memory
channel layer, for one process (``manage.py serve``). Scale-out: ``DATABASE_URL=postgres://…`` and
``REDIS_URL=redis://…``; then any number of daphne and worker processes may run at once.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def envbool(name: str, default: bool) -> bool:
    """Read a boolean variable; anything but a clear yes/no is a configuration error."""
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be true/false (or 1/0), got {value!r}")


def envint(name: str, default: int, *, minimum: int = 0) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None
    if number < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {number}")
    return number


DEBUG = envbool("DEBUG", False)
DATA_DIR = Path(os.environ.get("ASKCARDS_DATA_DIR") or BASE_DIR / "var")


def _secret_key() -> str:
    """ASKCARDS_SECRET_KEY, else a random key generated once and kept in the data directory.

    The key also encrypts bot secrets at rest, so losing it makes stored secrets unreadable.
    Several hosts must share one explicit ASKCARDS_SECRET_KEY (a system check says so).
    """
    key = os.environ.get("ASKCARDS_SECRET_KEY")
    if key:
        return key
    key_file = DATA_DIR / "secret_key"
    try:
        return key_file.read_text().strip()
    except FileNotFoundError:
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        key = secrets.token_urlsafe(50)
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(key)
        return key


SECRET_KEY = _secret_key()
SECRET_KEY_FROM_ENV = bool(os.environ.get("ASKCARDS_SECRET_KEY"))

ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "*" if DEBUG else "").split(",") if h.strip()]
ASKCARDS_PUBLIC_URL = os.environ.get("ASKCARDS_PUBLIC_URL", "").rstrip("/")
if not ALLOWED_HOSTS:
    # Local use works out of the box; a public deployment names its host via ASKCARDS_PUBLIC_URL.
    ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
    if ASKCARDS_PUBLIC_URL:
        from urllib.parse import urlsplit

        ALLOWED_HOSTS.append(urlsplit(ASKCARDS_PUBLIC_URL).hostname or "")
CSRF_TRUSTED_ORIGINS = [ASKCARDS_PUBLIC_URL] if ASKCARDS_PUBLIC_URL else []

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "channels",
    "askcards",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"
ASGI_APPLICATION = "project.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASE_URL = os.environ.get("DATABASE_URL", "")
# PostgreSQL connections come from a per-process pool (psycopg_pool, through Django's "pool"
# option): a request or worker pass borrows one instead of forking a new backend each time.
DB_POOL_MAX = int(os.environ.get("ASKCARDS_DB_POOL_MAX", "10"))
# Prepared statements do not survive a transaction-pooling proxy in front of PostgreSQL (PgBouncer
# before 1.21 in transaction mode): set ASKCARDS_DB_PREPARE=0 there.
DB_PREPARE = os.environ.get("ASKCARDS_DB_PREPARE", "1") != "0"
if DATABASE_URL:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0)}
    DATABASES["default"].setdefault("OPTIONS", {})
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and DB_POOL_MAX > 0:
        DATABASES["default"]["OPTIONS"]["pool"] = {"min_size": 1, "max_size": DB_POOL_MAX, "timeout": 10}
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and DB_PREPARE:
        # Parameters bound by the server, and statements a connection has run 5 times prepared:
        # PostgreSQL parses and plans the hot paths' statements (a click's ten) once per pooled
        # connection instead of on every request.
        DATABASES["default"]["OPTIONS"].update(server_side_binding=True, prepare_threshold=5)
else:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            # Django's SQLite backend, with this process's writers queued on a lock (see there).
            "ENGINE": "askcards.db.sqlite3",
            "NAME": DATA_DIR / "askcards.sqlite3",
            # Keep a SQLite connection per thread instead of reopening (and re-reading the schema)
            # for every pooled call; a broken one is replaced at the next request.
            "CONN_MAX_AGE": None,
            "CONN_HEALTH_CHECKS": True,
            "OPTIONS": {
                # IMMEDIATE takes the write lock at BEGIN, so concurrent transitions queue up
                # instead of failing with "database is locked" when a reader upgrades to a writer.
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    }

REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "capacity": 1000, "expiry": 60},
        }
    }
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "askcards.layers.ThrottledInMemoryChannelLayer", "CONFIG": {"capacity": 1000}}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
# People sign in to the panel with a Django account (any user, not only staff as /admin/login/ requires).
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/panel/"
LOGOUT_REDIRECT_URL = "/login/"
# Admin messages carry keys shown once: keep them server-side, not in a (readable) signed cookie.
MESSAGE_STORAGE = "django.contrib.messages.storage.session.SessionStorage"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["askcards.api.auth.AgentKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["askcards.api.auth.IsAgent"],
    "DEFAULT_PARSER_CLASSES": ["askcards.api.parsers.BoundedJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "EXCEPTION_HANDLER": "askcards.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "askcards agent API",
    "DESCRIPTION": "Ask people structured questions on Feishu, DingTalk and the web panel.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_AUTHENTICATION": [],
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "COMPONENT_SPLIT_REQUEST": True,
}

# askcards
ASKCARDS_ANSWER_RETENTION_DAYS = envint("ASKCARDS_ANSWER_RETENTION_DAYS", 7)
ASKCARDS_WORKER_TICK_SECONDS = 0.5
ASKCARDS_WEBHOOK_TIMEOUT_SECONDS = 10
ASKCARDS_WEBHOOK_RETRY_HOURS = 24
ASKCARDS_SURFACES: list[str] = [
    "askcards.surfaces.web.WebSurface",
    "askcards.surfaces.feishu.surface.FeishuSurface",
    "askcards.surfaces.dingtalk.surface.DingTalkSurface",
]
# DingTalk HTTP card callbacks: how far x-ddpaas-signature-timestamp may be from now (seconds).
ASKCARDS_DINGTALK_CALLBACK_SKEW_SECONDS = envint("ASKCARDS_DINGTALK_CALLBACK_SKEW_SECONDS", 3600)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}, "daphne": {"level": "WARNING"}},
}
