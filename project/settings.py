"""Settings, read from the environment (12-factor) with safe local defaults.

Every variable: README.md#configuration (what each means, its default) and docs/operations.md#deploying (compose).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dj_database_url

from core.env import env_bool, env_int_or_raw, env_list, env_str
from core.log_lines import JSONLines, configure_structlog

BASE_DIR = Path(__file__).resolve().parent.parent
RUN_DIR = Path(env_str("ROLLOUT_RUN_DIR", str(BASE_DIR / ".run")))

# A local default only: production sets DJANGO_SECRET_KEY.
SECRET_KEY = env_str("DJANGO_SECRET_KEY", "insecure-local-development-key-change-me")
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS") or ["localhost", "127.0.0.1", "[::1]", "testserver"]

INSTALLED_APPS = [
    "fleet.admin_site.FleetAdminConfig",  # django.contrib.admin, its site showing the plug-ins' notices
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files served by us (no CDN): /api/docs/ works offline
    "django_celery_beat",
    "fleet",
    "rollout",
    # The tools: `manage.py simulate_agents` (the simulated agents, which the host may not import).
    "demo",
]

MIDDLEWARE = [
    # First: a body over 1 MiB under /api/ answers 413 before anything reads it.
    "core.middleware.BodySizeLimitMiddleware",
    # Then every API request counts against its credential's limit (429 past it), before any view.
    "fleet.api.limits.RequestLimitMiddleware",
    # A database that is down is a 503 under /api/ (plain views; DRF's get it from core/exceptions.py).
    "core.middleware.DatabaseUnavailableMiddleware",
    # An API request answered: the server can hear, so a silent fleet is silent itself (fleet liveness).
    "fleet.api.heard.ServerHeardMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Serves the admin's static files from gunicorn too (no proxy needed for the console).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# Form posts (the admin): non-file fields at most 1 MiB in all, as the API's bodies.
DATA_UPLOAD_MAX_MEMORY_SIZE = 1 << 20

ROOT_URLCONF = "project.urls"
WSGI_APPLICATION = "project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
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

# PostgreSQL only (fleet.E007 refuses any other engine): a local server by default; `make demo` runs its own.
# Another engine (SQLite, MySQL, ...), or a URL that names none, is refused by a system check (fleet.E007)
# before anything connects to it: Django's dummy backend stands in for it, and any query raises
# ImproperlyConfigured. Only the URL's scheme is kept to say so: the rest may hold a password.
DATABASE_REFUSED = ""
_database_url = env_str("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/rollout")
_conn_max_age = int(env_str("DATABASE_CONN_MAX_AGE", "0") or 0)
try:
    DATABASES = {"default": dj_database_url.parse(_database_url, conn_max_age=_conn_max_age)}
except ValueError:  # an unknown scheme, no URL at all (dj_database_url's UnknownSchemeError is a ValueError)
    _scheme = _database_url.partition("://")[0] if "://" in _database_url else ""
    DATABASE_REFUSED = f"a URL of scheme {_scheme!r}, which names no database" if _scheme else "no URL"
    DATABASES = {"default": {"ENGINE": "django.db.backends.dummy"}}
if not DATABASE_REFUSED and DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
    DATABASE_REFUSED, DATABASES["default"] = DATABASES["default"]["ENGINE"], {"ENGINE": "django.db.backends.dummy"}
# A kept connection (DATABASE_CONN_MAX_AGE) is checked before a request reuses it: after a
# database restart the first request reconnects instead of failing on a dead connection.
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# A database host that accepts a connection and never answers (paused, black-holed) is given up on after
# DATABASE_CONNECT_TIMEOUT seconds, so /health answers 503 and /metrics 200 within seconds (docs/operations.md#health).
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault(
        "connect_timeout", int(env_str("DATABASE_CONNECT_TIMEOUT", "3") or 3)
    )
# Parallel test runs (CI and developers) each name their own test database.
if env_str("TEST_DATABASE_NAME"):
    DATABASES["default"]["TEST"] = {"NAME": env_str("TEST_DATABASE_NAME")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# The console's one date-time format with its zone, "2026-12-07 23:00 UTC" (project/formats/en/formats.py).
FORMAT_MODULE_PATH = ["project.formats"]

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"

# Binaries served under the downloads URL live in the default storage.
MEDIA_ROOT = Path(env_str("ROLLOUT_MEDIA_ROOT", str(RUN_DIR / "media")))
STORAGES: dict[str, dict[str, Any]] = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# Who moves a download's bytes (docs/operations.md#binary-delivery): "none" Django itself (local runs,
# the demo); "accel" nginx, from MEDIA_ROOT (X-Accel-Redirect: the web tier of compose and make web);
# "redirect" S3-compatible object storage, a 302 to a presigned URL (at most 15 minutes).
ROLLOUT_DOWNLOADS_OFFLOAD = env_str("ROLLOUT_DOWNLOADS_OFFLOAD", "none").lower()
ROLLOUT_DOWNLOADS_PRESIGN_SECONDS = env_int_or_raw("ROLLOUT_DOWNLOADS_PRESIGN_SECONDS", 900)
# The bucket (redirect mode). Credentials: boto3's own chain (AWS_ACCESS_KEY_ID and
# AWS_SECRET_ACCESS_KEY, an instance role, ...); an endpoint URL for a store other than AWS S3.
ROLLOUT_S3_BUCKET = env_str("ROLLOUT_S3_BUCKET")
ROLLOUT_S3_ENDPOINT_URL = env_str("ROLLOUT_S3_ENDPOINT_URL")
ROLLOUT_S3_REGION = env_str("ROLLOUT_S3_REGION")
if ROLLOUT_DOWNLOADS_OFFLOAD == "redirect":
    STORAGES["default"] = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": ROLLOUT_S3_BUCKET,
            "endpoint_url": ROLLOUT_S3_ENDPOINT_URL,
            "region_name": ROLLOUT_S3_REGION,
            # Another store than AWS (MinIO, Ceph, ...) is addressed by path: bucket names need no DNS.
            "addressing_style": "path" if ROLLOUT_S3_ENDPOINT_URL else None,
            "signature_version": "s3v4",
            "querystring_auth": True,
            "default_acl": None,  # private objects: only presigned URLs read them
            "file_overwrite": True,
        },
    }
# Without collectstatic (local runs, the demo), WhiteNoise finds files in the apps directly.
WHITENOISE_USE_FINDERS = True
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise expects it, collected or not


REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["fleet.api.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["fleet.api.permissions.FleetAdmin"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["core.parsers.StrictJSONParser"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "core.pagination.CursorPagination",
    "EXCEPTION_HANDLER": "core.exceptions.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "rollout",
    "DESCRIPTION": "Signed bcd releases and wave rollouts.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # /api/docs/ loads Swagger UI from our own static files (drf-spectacular-sidecar), never from a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {"ServiceStateEnum": "rollout.api.views.health.SERVICE_STATES"},
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "rollout.api.schema.postprocess_schema",
    ],
}

# --- Celery -----------------------------------------------------------------
# Without CELERY_BROKER_URL, an embedded broker that needs no server: the
# filesystem transport (local runs and the demo only). Production: Redis or RabbitMQ
# (docs/operations.md#brokers). The connection class that keeps a worker alive through
# a broker outage is the app's (project/broker.py).
_broker_dir = RUN_DIR / "broker"
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    for sub in ("queue", "processed", "control"):
        (_broker_dir / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
elif CELERY_BROKER_URL.startswith(("amqp://", "amqps://", "pyamqp://")):
    # RabbitMQ (docs/operations.md#brokers): it redelivers an unacked message when its consumer's connection
    # closes, so there is no visibility timeout; a consumer holding one (an ETA task) past the server's
    # consumer_timeout (30 min by default) loses its channel: rollout/dispatch.py schedules nothing that far.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # As for Redis: a web request publishing to a RabbitMQ that is unreachable gives up after 0.5 s.
        "connect_timeout": 0.5,
    }
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # Redis redelivers an unacked (acks_late) or ETA task after this long;
        # every task is idempotent, so a redelivery is harmless.
        "visibility_timeout": 3600,
        # A Redis that is down or unreachable must fail fast rather than hang a web
        # request or a worker: connecting gives up after 0.5 s (a LAN connect takes
        # milliseconds); a read after 5 s (above the worker's 1 s BRPOP poll, so an
        # idle worker never times out).
        "socket_connect_timeout": 0.5,
        "socket_timeout": 5,
        "socket_keepalive": True,
        # Not retried inside redis-py: a connect that timed out would be tried again
        # there and again per publish retry, doubling how long a web request waits
        # on an unreachable Redis (measured: 2.1 s instead of 1.1 s). Retrying is
        # kombu's job (the publish policy below; the worker reconnects forever).
        "retry_on_timeout": False,
        # PING an idle pooled connection before use when it was idle this long: a
        # connection Redis dropped (restart, failover) is replaced, not used to fail.
        "health_check_interval": 25,
    }
# RabbitMQ only (Redis has no such heartbeats): the worker's consumer and RabbitMQ check each other every
# 10 s, so a broker that vanished without closing the connection (a network partition) is noticed in
# about 20 s rather than Celery's default 4 minutes.
CELERY_BROKER_HEARTBEAT = 10
# The worker (and beat) wait for the broker however long it is down, retrying
# quietly, instead of exiting after a few attempts and relying on a restart loop.
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None  # None: forever
CELERY_BROKER_CONNECTION_TIMEOUT = 2  # seconds to establish a connection (kombu's connect_timeout)
# Publishing from a web request (rollout/dispatch.py) must not block it for long
# when Redis is down: one retry after 0.1 s, then the error is logged and the
# message dropped (the periodic tick redoes its work). About 1 s at most on an
# unreachable host (2 x the 0.5 s connect timeout), 0.1 s on a refused port.
CELERY_TASK_PUBLISH_RETRY = True
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0.1, "interval_step": 0.1, "interval_max": 0.1}
# When the worker loses the broker, tasks it is running are cancelled rather
# than left to finish unacknowledged: every task is idempotent and acks_late,
# so Redis redelivers each one after the visibility timeout (or the periodic
# tick redoes it), and no task runs on while its outcome can no longer be acked
# (it would be redelivered and run twice anyway). Deliberate, and silences
# Celery 5's warning about the default changing in 6.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
# One queue per deployment (tests use their own so parallel runs never share tasks).
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_TASK_DEFAULT_QUEUE", "celery")
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = 60
CELERY_TASK_TIME_LIMIT = 120
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE = "UTC"
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Webhook deliveries and gate evaluations may go to their own queues (a worker started with
# --queues=<it>), so that dead receivers or a hanging Prometheus never hold the workers that run the
# controller. By default they share the default queue.
CELERY_TASK_ROUTES = {
    "rollout/webhook-deliver": {"queue": env_str("ROLLOUT_WEBHOOKS_QUEUE", CELERY_TASK_DEFAULT_QUEUE)},
    "rollout/gates-due": {"queue": env_str("ROLLOUT_GATES_QUEUE", CELERY_TASK_DEFAULT_QUEUE)},
}

# --- The fleet (host) ---------------------------------------------------------
FLEET_MIN_PROTOCOL_VERSION = env_int_or_raw("FLEET_MIN_PROTOCOL_VERSION", 2)
FLEET_HEARTBEAT_SECONDS = env_int_or_raw("FLEET_HEARTBEAT_SECONDS", 10)
# An API request answered counts as the server hearing (fleet/api/heard.py; docs/controller.md, liveness).
FLEET_HEARD_BY_API = env_bool("FLEET_HEARD_BY_API", True)
# Held agent sessions (docs/fleet.md#watch): a web process that lost its LISTEN connection tries again after
# this many seconds (its held requests answer at their wait meanwhile).
FLEET_WATCH_RECONNECT_SECONDS = env_int_or_raw("FLEET_WATCH_RECONNECT_SECONDS", 1)
# How long a web process's LISTEN connection may stay quiet before it must answer a SELECT 1 (within as long).
FLEET_WATCH_PING_SECONDS = env_int_or_raw("FLEET_WATCH_PING_SECONDS", 30)
# How many approvals a new tenant's rollouts need (0 to 5; docs/controller.md#approvals; fleet.E009). Each
# tenant keeps its own setting afterwards (manage.py settenant, the admin).
ROLLOUT_APPROVALS = env_int_or_raw("ROLLOUT_APPROVALS", 0)

# --- The web tier (project/asgi.py) -------------------------------------------------
# Threads per web process for Django's synchronous views, and as many for the agent sessions' statements.
WEB_THREADS = env_int_or_raw("WEB_THREADS", 4)
# Agent-session requests one web process takes at a time (held ones not counted); one more is refused at once with
# 503 overloaded and a Retry-After (docs/operations.md#admission-control). 0: no bound.
WEB_SESSIONS_IN_PROGRESS = env_int_or_raw("WEB_SESSIONS_IN_PROGRESS", 256)

# --- Single sign-on for the console (docs/operations.md#single-sign-on; sso.E001-E005, sso.W001) ------------
# OpenID Connect: all three set turns it on; the provider's endpoints come from its discovery document.
OIDC_ISSUER_URL = env_str("OIDC_ISSUER_URL", "")
OIDC_CLIENT_ID = env_str("OIDC_CLIENT_ID", "")
OIDC_CLIENT_SECRET = env_str("OIDC_CLIENT_SECRET", "")
# The button's text: "Sign in with <OIDC_NAME>".
OIDC_NAME = env_str("OIDC_NAME", "single sign-on")
OIDC_GROUPS_CLAIM = env_str("OIDC_GROUPS_CLAIM", "groups")
# group=tenant:permission,... e.g. sre=acme:compute:fleet:admin,sre-leads=acme:compute:rollout:approve
OIDC_ROLE_MAP = env_str("OIDC_ROLE_MAP", "")
# A console session signed in through the provider ends this many seconds after the sign-in, at the latest.
OIDC_SESSION_MAX_AGE = env_int_or_raw("OIDC_SESSION_MAX_AGE", 8 * 3600)
OIDC_RP_SCOPES = env_str("OIDC_SCOPES", "openid email profile groups")
# The redirect URI registered at the provider, e.g. https://rollout.example.com/admin/sso/callback/; unset: built
# from the request (set it behind a proxy that terminates TLS: Django sees http there).
OIDC_REDIRECT_URI = env_str("OIDC_REDIRECT_URI", "")
# 0: the admin's password form is gone and a posted password refused (only SSO signs in).
ADMIN_PASSWORD_LOGIN = env_bool("ADMIN_PASSWORD_LOGIN", True)
# mozilla-django-oidc's own names (fleet/sso/backend.py, views.py).
OIDC_RP_SIGN_ALGO = env_str("OIDC_SIGN_ALGO", "RS256")
OIDC_USE_PKCE = True
OIDC_TIMEOUT = 10
OIDC_AUTHENTICATION_CALLBACK_URL = "sso-callback"
LOGIN_REDIRECT_URL = "/admin/"
AUTHENTICATION_BACKENDS = [
    *(["fleet.sso.backend.ConsoleOIDCBackend"] if OIDC_ISSUER_URL and OIDC_CLIENT_ID and OIDC_CLIENT_SECRET else []),
    *(["django.contrib.auth.backends.ModelBackend"] if ADMIN_PASSWORD_LOGIN else []),
]

# --- Request limits per credential (docs/operations.md#request-limits; fleet.E001-E003) -----------
API_KEY_RATE = env_str("API_KEY_RATE", "1200/min")
# The longest a key made through the API may live: 30d, 12h, 90m; "none" lifts the cap (docs/api.md#api-keys;
# fleet.E010). manage.py createapikey is not bounded by it.
API_KEY_MAX_LIFETIME = env_str("API_KEY_MAX_LIFETIME", "none")
# Each key's lastUsedAt, written at most once a minute per key (fleet/services/apikeys.py api_key_touch). The test
# suite turns it off, so that a request's statements are counted alike whenever it comes.
API_KEY_LAST_USED = env_bool("API_KEY_LAST_USED", True)
# 5 requests per FLEET_HEARTBEAT_SECONDS, averaged over a minute (30/min at 10 s).
AGENT_TOKEN_RATE = env_str("AGENT_TOKEN_RATE", "5/heartbeat")
# The shared cache, a Redis apart from the broker (which may be RabbitMQ): where every web process's
# request counts meet. Unset: each process counts alone (the demo; `check --deploy` warns: fleet.W001).
CACHE_URL = env_str("CACHE_URL", "")
if CACHE_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}}

# --- The rollout module (README.md#configuration: one setting, ROLLOUT) ---------
# Webhooks: http:// and private/loopback receivers only with ROLLOUT_WEBHOOKS_ALLOW_HTTP=1 (tests,
# demo). Link-local and metadata addresses are refused whatever it says.
ROLLOUT_WEBHOOKS_ALLOW_HTTP = env_bool("ROLLOUT_WEBHOOKS_ALLOW_HTTP", False)
# Gates (docs/controller.md#gates): the installation's Prometheus (rollouts cannot name another), and
# the prefixes an HTTP gate's URL must begin with (none: HTTP gates are refused).
ROLLOUT_PROMETHEUS_URL = env_str("ROLLOUT_PROMETHEUS_URL")
ROLLOUT_GATE_URL_ALLOW = env_list("ROLLOUT_GATE_URL_ALLOW")
ROLLOUT = {
    "release": {
        "pins": env_list("ROLLOUT_RELEASE_PINS"),
        "threshold": env_int_or_raw("ROLLOUT_RELEASE_THRESHOLD", 1),
    },
    "downloadsUrl": env_str("ROLLOUT_DOWNLOADS_URL"),
    "every": env_int_or_raw("ROLLOUT_EVERY", 30),
}

# --- Logging: one JSON object per line ---------------------------------------------
LOG_LEVEL = env_str("LOG_LEVEL", "INFO")
configure_structlog()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": JSONLines}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.server": {"level": "WARNING"},
        "django.db.backends": {"level": "WARNING"},
    },
}
