"""askcards settings: everything comes from the environment.

Embedded default (no variables set): SQLite file under ``ASKCARDS_DATA_DIR`` and in-process
wakes (``askcards.wake.hub``), for one process (``manage.py serve``). Scale-out: ``DATABASE_URL=postgres://…`` and
``REDIS_URL=redis://…``; then any number of daphne and worker processes may run at once.
"""
from __future__ import annotations

import ipaddress
import os
import secrets
import tempfile
from datetime import timedelta
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


def envint(name: str, default: int, *, minimum: int = 0, maximum: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None
    if number < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {number}")
    if maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name} must be <= {maximum}, got {number}")
    return number


DEBUG = envbool("DEBUG", False)
DATA_DIR = Path(os.environ.get("ASKCARDS_DATA_DIR") or BASE_DIR / "var")


def _private_dir(path: Path) -> Path:
    """Create the data directory readable by this user only (0700). An existing directory keeps
    its mode (an operator may share it, e.g. STATIC_ROOT with a web server); the files in it that
    hold secrets are 0600 either way (the key here, the database in askcards/db/sqlite3)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def _secret_key() -> str:
    """ASKCARDS_SECRET_KEY, else a random key generated once and kept in the data directory (0600).

    The key also encrypts bot secrets at rest, so losing it makes stored secrets unreadable.
    Several hosts must share one explicit ASKCARDS_SECRET_KEY (a system check says so).
    Processes that start together agree on one key: each writes its candidate to a private
    temporary file and links it into place, which succeeds for exactly one of them (a link never
    replaces an existing file); the others read the winner's complete file.
    """
    key = os.environ.get("ASKCARDS_SECRET_KEY")
    if key:
        return key
    key_file = _private_dir(DATA_DIR) / "secret_key"
    if not key_file.exists():
        fd, tmp = tempfile.mkstemp(dir=DATA_DIR, prefix=".secret_key.")  # created 0600
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(50))
                fh.flush()
                os.fsync(fh.fileno())
            os.link(tmp, key_file)
        except FileExistsError:
            pass  # another process won the race: its key is complete, read it below
        finally:
            os.unlink(tmp)
    key = key_file.read_text().strip()
    if not key:
        raise ImproperlyConfigured(f"{key_file} is empty: delete it to generate a new key, or set ASKCARDS_SECRET_KEY")
    return key


SECRET_KEY = _secret_key()
SECRET_KEY_FROM_ENV = bool(os.environ.get("ASKCARDS_SECRET_KEY"))

ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "*" if DEBUG else "").split(",") if h.strip()]
ASKCARDS_PUBLIC_URL = os.environ.get("ASKCARDS_PUBLIC_URL", "").rstrip("/")
# `manage.py serve`'s port when none is given, and the local URL commands print while no public
# URL is set (the MCP URL): `PORT`, as most hosts and quickstarts name it.
ASKCARDS_PORT = os.environ.get("PORT", "").strip() or "8000"
if not ALLOWED_HOSTS:
    # Local use works out of the box; a public deployment names its host via ASKCARDS_PUBLIC_URL.
    ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
    if ASKCARDS_PUBLIC_URL:
        from urllib.parse import urlsplit

        ALLOWED_HOSTS.append(urlsplit(ASKCARDS_PUBLIC_URL).hostname or "")
CSRF_TRUSTED_ORIGINS = [ASKCARDS_PUBLIC_URL] if ASKCARDS_PUBLIC_URL else []


def _proxy_ssl_header(value: str) -> tuple[str, str] | None:
    """ASKCARDS_PROXY_SSL_HEADER=X-Forwarded-Proto (or "X-Forwarded-Proto: https"): the header a
    TLS-terminating proxy sets on requests that came in over https. Only set it behind a proxy
    that overwrites the header, or any client can claim https."""
    if not value.strip():
        return None
    name, _, expected = value.partition(":")
    name, expected = name.strip(), expected.strip() or "https"
    if not name or not all(ch.isalnum() or ch == "-" for ch in name) or not expected.isalnum():
        raise ImproperlyConfigured(
            "ASKCARDS_PROXY_SSL_HEADER must be a header name like X-Forwarded-Proto (optionally "
            f"followed by ': https'), got {value!r}"
        )
    return "HTTP_" + name.upper().replace("-", "_"), expected


SECURE_PROXY_SSL_HEADER = _proxy_ssl_header(os.environ.get("ASKCARDS_PROXY_SSL_HEADER", ""))
# Served over https (ASKCARDS_PUBLIC_URL=https://…): cookies only over TLS, HSTS, http redirected to
# https (except /healthz, which load balancers probe over plain http). Local use over http keeps
# plain cookies so the panel login works on http://127.0.0.1.
HTTPS = ASKCARDS_PUBLIC_URL.startswith("https://")
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = HTTPS
SESSION_COOKIE_HTTPONLY = True
SECURE_HSTS_SECONDS = envint("ASKCARDS_HSTS_SECONDS", 365 * 24 * 3600) if HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_PRELOAD = HTTPS and SECURE_HSTS_SECONDS > 0
SECURE_SSL_REDIRECT = HTTPS and envbool("ASKCARDS_SSL_REDIRECT", True)
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

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
    "drf_spectacular_sidecar",  # Swagger UI's files, served from our static files (no CDN)
    "axes",  # login throttling (AXES_* below)
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
    "askcards.operators.timezones.OperatorTimeZoneMiddleware",  # admin pages in the operator's own zone
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # last: turns a locked-out sign-in into the 429 page
]

# Sign-in throttling (/login/ and /admin/login/) by django-axes: failed attempts are rows in the
# database, so every process of a deployment (SQLite or PostgreSQL, with or without Redis) counts
# the same attempts. After ASKCARDS_LOGIN_FAILURE_LIMIT wrong passwords for one username from one
# address, that pair is refused (429) for ASKCARDS_LOGIN_COOLOFF_MINUTES, even with the right
# password; a success resets the count. `manage.py axes_reset` lifts every lockout.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = envint("ASKCARDS_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=envint("ASKCARDS_LOGIN_COOLOFF_MINUTES", 15, minimum=1))
# Username and address together: guessing one account from one address is stopped, while nobody
# can lock a user out everywhere or all users of one address. The address is REMOTE_ADDR: behind a
# proxy run daphne with --proxy-headers so it is the client's, not the proxy's.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_DISABLE_ACCESS_LOG = True  # successful sign-ins are not recorded (the table would only grow)
AXES_HTTP_RESPONSE_CODE = 429

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
    _private_dir(DATA_DIR)
    DATABASES = {
        "default": {
            # Django's SQLite backend, with this process's writers queued on a lock (see there).
            "ENGINE": "askcards.db.sqlite3",
            "NAME": str(DATA_DIR / "askcards.sqlite3"),
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
# The cache holds the platforms' access tokens (askcards.surfaces.http.TokenCache), read before
# every card push: a Redis that stops answering (hung, or its host unreachable) costs a push at
# most these seconds, then the process's own copy of the token serves, instead of the push (and
# the worker lane behind it) waiting for ever, redis-py's default.
REDIS_CACHE_OPTIONS = {"socket_connect_timeout": 1.0, "socket_timeout": 1.0}
# REDIS_URL also carries the wakes between processes: askcards.wake.bus, Redis pub/sub, one subscriber
# connection per process (askcards.wake.hub keeps the waiters; no channel layer is configured).
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL,
                          "OPTIONS": REDIS_CACHE_OPTIONS}}
else:
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
    "DESCRIPTION": (
        "Ask people structured questions on Feishu, DingTalk and the web panel.\n\n"
        "Every error is `{\"error\": {\"code\", \"message\"}}`; each operation lists the statuses and codes it "
        "may answer. Request bodies and query parameters are exactly as declared: an unknown field, a value out "
        "of its range, a query parameter given empty or twice is a 400 `invalid_input` naming it. A method an "
        "operation's path does not list is answered 405 `method_not_allowed`, with an `Allow` header naming the "
        "methods it takes. A body over the server's limit is a 413 `request_too_large` on any path."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_AUTHENTICATION": [],
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "COMPONENT_SPLIT_REQUEST": True,
    # Named here so the schema's enum names are stable (and check --deploy has nothing to warn).
    "ENUM_NAME_OVERRIDES": {
        "ProgressStatusEnum": "askcards.models.ProgressCard.Status",
        "AskStatusEnum": "askcards.models.Ask.Status",
        "AskReasonEnum": "askcards.models.Ask.Reason",
        "RespondentStatusEnum": "askcards.models.Respondent.Status",
        "ToolCallStatusEnum": "askcards.api.serializers.TOOL_CALL_STATUSES",
        "ErrorCodeEnum": "askcards.api.codes.ERROR_CODES",
        "ToolNameEnum": "askcards.tools.REGISTRY",
    },
    # /api/docs/ loads Swagger UI from drf-spectacular-sidecar's static files, not a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# askcards
ASKCARDS_ANSWER_RETENTION_DAYS = envint("ASKCARDS_ANSWER_RETENTION_DAYS", 7)
# Audit rows of asks closed this many days ago, and outbox events delivered or given up this many
# days ago, are pruned by the worker (0 keeps them forever). See askcards/services/retention.py.
ASKCARDS_AUDIT_RETENTION_DAYS = envint("ASKCARDS_AUDIT_RETENTION_DAYS", 90)
ASKCARDS_EVENT_RETENTION_DAYS = envint("ASKCARDS_EVENT_RETENTION_DAYS", 30)
# Asks closed this many days ago are deleted with their respondents, cards, audit rows and events
# (never an open one, nor one whose result the agent has still to receive); 0 keeps them forever.
ASKCARDS_ASK_RETENTION_DAYS = envint("ASKCARDS_ASK_RETENTION_DAYS", 180)
# Per-agent quotas (services.quotas); an agent's own values (admin) override these; 0 is no limit.
ASKCARDS_QUOTA_PENDING_ASKS = envint("ASKCARDS_QUOTA_PENDING_ASKS", 1000)
ASKCARDS_QUOTA_PENDING_PER_RESPONDENT = envint("ASKCARDS_QUOTA_PENDING_PER_RESPONDENT", 50)
ASKCARDS_QUOTA_PARKED_WAITS = envint("ASKCARDS_QUOTA_PARKED_WAITS", 1000)
ASKCARDS_QUOTA_ASKS_PER_MINUTE = envint("ASKCARDS_QUOTA_ASKS_PER_MINUTE", 120)
ASKCARDS_QUOTA_ASK_BURST = envint("ASKCARDS_QUOTA_ASK_BURST", 200)
# Asks one panel socket shows at once (the oldest); the rest are counted (「还有 N 个问题等待回答」)
# and come in as those on the page end. surfaces/web.py.
ASKCARDS_PANEL_PAGE = envint("ASKCARDS_PANEL_PAGE", 20, minimum=1, maximum=10_000)
# How long the ask of a blocking MCP call stays answerable after its client went away, for a re-call
# with the same call_id or a task read to take it back; then it is cancelled (caller_gone).
# services/waiters.py.
ASKCARDS_MCP_CALLER_GRACE_SECONDS = envint("ASKCARDS_MCP_CALLER_GRACE_SECONDS", 60, minimum=1, maximum=86_400)
# Pruning: ids per DELETE (each its own short transaction), and DELETE windows per housekeeping pass.
ASKCARDS_PRUNE_BATCH = envint("ASKCARDS_PRUNE_BATCH", 2000, minimum=1, maximum=10_000)
ASKCARDS_PRUNE_BATCHES_PER_PASS = envint("ASKCARDS_PRUNE_BATCHES_PER_PASS", 50, minimum=1)
ASKCARDS_WORKER_TICK_SECONDS = 0.5
# Webhook POSTs: seconds to establish the connection, and seconds any single read of the response
# (status line and headers; the body is never read) may wait. See askcards/http/netguard.py.
ASKCARDS_WEBHOOK_CONNECT_TIMEOUT_SECONDS = 5
ASKCARDS_WEBHOOK_READ_TIMEOUT_SECONDS = 10
# Webhooks may reach loopback and private ranges (127/8, 10/8, 172.16/12, 192.168/16, fc00::/7,
# 100.64/10, ...) only when true; link-local and cloud-metadata addresses are refused regardless.
ASKCARDS_WEBHOOK_ALLOW_PRIVATE = envbool("ASKCARDS_WEBHOOK_ALLOW_PRIVATE", False)
ASKCARDS_WEBHOOK_RETRY_HOURS = 24
ASKCARDS_SURFACES: list[str] = [
    "askcards.surfaces.web.WebSurface",
    "askcards.surfaces.feishu.surface.FeishuSurface",
    "askcards.surfaces.dingtalk.surface.DingTalkSurface",
]
# DingTalk HTTP card callbacks: how far x-ddpaas-signature-timestamp may be from now (seconds).
# The signature covers only the timestamp, so this is how long a captured pair is worth anything
# (and each pair is accepted once). DingTalk signs a callback when it sends it and wants the answer
# within 2 s (platform §1.6), so a genuine timestamp is seconds old: 5 minutes covers that plus
# clock drift between DingTalk and an NTP-synced host (Feishu callbacks get the same window).
# At most an hour (the platform's robot rule): a pair stays acceptable for at most 2 × skew after
# it was signed, well within the day its receipt is kept (services.CALLBACK_RECEIPT_TTL).
ASKCARDS_DINGTALK_CALLBACK_SKEW_SECONDS = envint(
    "ASKCARDS_DINGTALK_CALLBACK_SKEW_SECONDS", 300, minimum=1, maximum=3600
)


# The server's edge (askcards/http/serverguard.py). A connection has ASKCARDS_HEADER_TIMEOUT seconds
# from opening (ASKCARDS_KEEPALIVE_TIMEOUT from its previous response) to start a request and
# ASKCARDS_HEADER_TIMEOUT from the request's first byte to finish its headers, then
# ASKCARDS_BODY_TIMEOUT seconds for the body (408 and closed otherwise); a request handed to the
# application is no longer timed here. The keep-alive bound is longer than the idle pools of
# common clients (aiohttp 15 s, httpx 5 s, Node 5 s) and nginx's upstream keepalive_timeout
# (60 s), so that they, not the server, close an idle connection: otherwise a request sent on a
# connection the server is closing fails (aiohttp's "Server disconnected", nginx's 502).
ASKCARDS_HEADER_TIMEOUT = envint("ASKCARDS_HEADER_TIMEOUT", 10, minimum=1, maximum=3600)
ASKCARDS_KEEPALIVE_TIMEOUT = envint("ASKCARDS_KEEPALIVE_TIMEOUT", 75, minimum=1, maximum=3600)
ASKCARDS_BODY_TIMEOUT = envint("ASKCARDS_BODY_TIMEOUT", 30, minimum=1, maximum=3600)
# Connections one peer address may hold that are not inside a request (opening, sending a
# request, idle between requests); 0 = no cap (behind a reverse proxy every peer is the proxy).
ASKCARDS_PEER_CONNECTIONS = envint("ASKCARDS_PEER_CONNECTIONS", 100, minimum=0)
# On the keyed routes (/api/v1/…, /mcp), a body larger than this is read only after the agent
# key has been checked (a bad key: 401 before the rest); smaller ones cost no extra query.
ASKCARDS_PRE_AUTH_BODY_BYTES = envint("ASKCARDS_PRE_AUTH_BODY_BYTES", 8192, minimum=0, maximum=1024 * 1024)


def _networks(name: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """Addresses or networks separated by commas or spaces (``127.0.0.1, 10.0.0.0/8, ::1``)."""
    networks = []
    for entry in os.environ.get(name, "").replace(",", " ").split():
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ImproperlyConfigured(f"{name}: {entry!r} is not an IP address or network (like 10.0.0.0/8)") from None
    return tuple(networks)


# GET /metrics (Prometheus text; askcards/operators/metrics.py). Refused (404) unless one of these is set:
# a Bearer token the scraper sends, and/or the addresses it may scrape from (the direct peer's
# address: behind a proxy, the proxy's). With both set, a scrape needs both.
ASKCARDS_METRICS_TOKEN = os.environ.get("ASKCARDS_METRICS_TOKEN", "").strip()
ASKCARDS_METRICS_ALLOW = _networks("ASKCARDS_METRICS_ALLOW")

# Log lines: "plain" text (default) or "json" (one JSON object a line: time, level, logger,
# message, and the traceback of an error), for log collectors that parse fields.
ASKCARDS_LOG_FORMAT = os.environ.get("ASKCARDS_LOG_FORMAT", "plain").strip().lower() or "plain"
if ASKCARDS_LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"ASKCARDS_LOG_FORMAT must be plain or json, got {ASKCARDS_LOG_FORMAT!r}")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "askcards.runtime.logformat.JsonFormatter"},
    },
    "filters": {"refusal": {"()": "askcards.http.edge.RefusalWithoutTraceback"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": ASKCARDS_LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        # Django logs each of these refusals (its 400s) on its own logger, with a traceback.
        **{
            f"django.security.{name}": {"filters": ["refusal"]}
            for name in ("DisallowedHost", "SuspiciousOperation", "SuspiciousFileOperation", "RequestDataTooBig",
                         "TooManyFieldsSent", "TooManyFilesSent", "DisallowedRedirect", "DisallowedModelAdminLookup",
                         "DisallowedModelAdminToField", "InvalidSessionKey", "SuspiciousSession",
                         "SuspiciousMultipartForm", "csrf")
        },
        "django.request": {"filters": ["refusal"]},  # its 4xx lines (a denied admin page) carry a traceback too
        "django.db.backends": {"level": "WARNING"},
        "daphne": {"level": "WARNING"},
        "axes.apps": {"level": "WARNING"},  # its start-up banner, in every command
        # The MCP SDK logs every stateless request's transport ending ("Terminating session: None").
        "mcp.server.streamable_http": {"level": "WARNING"},
        "mcp.server.streamable_http_manager": {"level": "WARNING"},
    },
}
