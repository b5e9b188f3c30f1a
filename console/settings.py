"""Settings, read once from the environment at start (cookiecutter-django style).

Every knob is an environment variable; nothing here touches the network or the disk.
`console.config` validates the values that can be malformed and turns them into
one clear sentence instead of a traceback.
"""

from __future__ import annotations

from pathlib import Path

import environ
from csp.constants import NONE, SELF

from console.config import ConfigError, database_config, local_agent_gpus, redis_url
from scheduling.beat import schedule as beat_schedule
from telemetry.beat import schedule as telemetry_beat_schedule

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

env = environ.Env()

DEBUG: bool = env.bool("DJANGO_DEBUG", default=True)
SECRET_KEY: str = env.str(
    "DJANGO_SECRET_KEY",
    default="dev-only-insecure-key-set-DJANGO_SECRET_KEY-in-production",
)
if not DEBUG and SECRET_KEY.startswith("dev-only-"):
    raise ConfigError("DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is false.")
ALLOWED_HOSTS: list[str] = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])
PORT: int = env.int("PORT", default=8000)
CONSOLE_DEMO: bool = env.bool("CONSOLE_DEMO", default=True)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "guardian",
    "axes",
    "csp",
    "channels",
    "django_htmx",
    "quotas",
    "workspaces",
    "scheduling",
    "telemetry",
    "slurm",
    "live",
    "console",
    # The bottom package (utilities/__init__.py): an app for its templates only.
    "utilities",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Our CSP middleware adds the websocket origin of the request's own host (console.csp).
    "console.csp.ConsoleCSPMiddleware",
    # Last, as axes asks: it turns a locked-out sign-in on a page into console.signin's answer.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "console.urls"
ASGI_APPLICATION = "console.asgi.application"
WSGI_APPLICATION = "console.wsgi.application"

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
                "console.context_processors.navigation",
            ],
        },
    },
    # Second, for the row templates of thousand-row tables only (console/jinja.py says why);
    # each app keeps them in its own jinja2/ directory, so Django's engine never picks up one of
    # these by name.
    {
        "BACKEND": "django.template.backends.jinja2.Jinja2",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {"environment": "console.jinja.environment"},
    },
]

DATABASE_POOL_SIZE: int = env.int("DATABASE_POOL_SIZE", default=10)
DATABASES = {"default": database_config(env.str("DATABASE_URL", default=""), VAR_DIR, pool_size=DATABASE_POOL_SIZE)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL: str = redis_url(env.str("REDIS_URL", default=""))

AUTHENTICATION_BACKENDS = [
    # First: refuses a locked-out username before any password is checked (django-axes).
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
    "guardian.backends.ObjectPermissionBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"
GUARDIAN_RAISE_403 = False
ANONYMOUS_USER_NAME = None

# Sign-in throttling (django-axes): after CONSOLE_SIGNIN_FAILURE_LIMIT failed sign-ins for a
# username, that username is refused for CONSOLE_SIGNIN_LOCKOUT_MINUTES, on the token endpoint
# and the login page alike. Counted per username, not per IP: a guesser rotating addresses is
# stopped all the same (the price: a guesser can keep a known username locked; see docs/operations.md).
CONSOLE_SIGNIN_FAILURE_LIMIT: int = env.int("CONSOLE_SIGNIN_FAILURE_LIMIT", default=5)
CONSOLE_SIGNIN_LOCKOUT_MINUTES: int = env.int("CONSOLE_SIGNIN_LOCKOUT_MINUTES", default=5)
if CONSOLE_SIGNIN_FAILURE_LIMIT < 1 or CONSOLE_SIGNIN_LOCKOUT_MINUTES < 1:
    raise ConfigError("CONSOLE_SIGNIN_FAILURE_LIMIT and CONSOLE_SIGNIN_LOCKOUT_MINUTES must be at least 1.")
# Callables rather than copies, so the CONSOLE_ names stay the one source (tests override them).
AXES_FAILURE_LIMIT = "console.signin.failure_limit"
AXES_COOLOFF_TIME = "console.signin.lockout_duration"
AXES_LOCKOUT_PARAMETERS = ["username"]
# axes.W006 warns that a lockout without the IP can be dodged by rotating user agents or cookies;
# ours is keyed by the username alone, which no rotation changes (spraying many usernames from
# one address is the reverse proxy's rate limit to stop; docs/operations.md).
SILENCED_SYSTEM_CHECKS = ["axes.W006"]
AXES_RESET_ON_SUCCESS = True  # a successful sign-in forgets the earlier failures
AXES_LOCKOUT_CALLABLE = "console.signin.lockout_response"
AXES_VERBOSE = False  # axes logs every attempt at INFO otherwise; lockouts are still logged

# DRF tokens expire this many hours after they were issued (console.tokens); a new sign-in on
# /api/v1/auth/token/ after that issues a new one.
CONSOLE_TOKEN_TTL_HOURS: float = env.float("CONSOLE_TOKEN_TTL_HOURS", default=720.0)
if CONSOLE_TOKEN_TTL_HOURS <= 0:
    raise ConfigError("CONSOLE_TOKEN_TTL_HOURS must be more than 0.")

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    # plotly/plotly.min.js from the pinned plotly package (no CDN, no copy in the repository).
    "console.staticfinders.PlotlyFinder",
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}
WHITENOISE_USE_FINDERS = DEBUG

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: its WWW-Authenticate header makes anonymous requests a 401, not a 403.
        "console.tokens.ExpiringTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # API.md speaks JSON; form and multipart bodies were a second, untested way in (the token
    # endpoint alone also takes a form, for curl -d).
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    "DEFAULT_PAGINATION_CLASS": "console.pagination.BoundedLimitOffsetPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "console.openapi.ConsoleAutoSchema",
    "EXCEPTION_HANDLER": "console.api.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU Quota Console API",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI's assets come from the sidecar package through our static files: no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "JobKindEnum": "scheduling.models.JobKind",
        "JobEventKindEnum": "scheduling.models.JobEventKind",
    },
}

# Content-Security-Policy (django-csp): only our own origin. No 'unsafe-inline' anywhere: pages
# keep their scripts and styles in static files. console.csp adds ws:// or wss:// of the
# request's own host to connect-src, since 'self' does not cover websockets in every browser.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}

# channels_redis waits for a socket's next message in a blocking read of 5 s, and redis-py 8 gives
# every read a 5 s timeout by default: a live socket idle for 5 s lost its consumer to a
# TimeoutError (with a traceback) and reconnected. Reads may outlast the blocking wait.
CHANNEL_LAYER_READ_TIMEOUT_SECONDS = 15
# Messages waiting for one web process (all its sockets share one Redis inbox, and each group_send
# puts one message there per process); beyond it channels_redis drops them. Its default, 100, was
# overrun by one S3 cycle's commit while 200 sockets listened (benchmarks/live_fanout.py).
CHANNEL_LAYER_CAPACITY = env.int("CHANNEL_LAYER_CAPACITY", default=5000)


def channel_layer_host(url: str) -> dict[str, object]:
    return {"address": url, "socket_timeout": CHANNEL_LAYER_READ_TIMEOUT_SECONDS}


CHANNEL_LAYERS = {
    "default": {
        # The live layer sends through its group_send_many (scheduling.live.send_topic_changes).
        "BACKEND": "console.channel_layer.ConsoleChannelLayer",
        "CONFIG": {
            "hosts": [channel_layer_host(REDIS_URL)],
            "prefix": env.str("CHANNELS_PREFIX", default="asgi"),
            "capacity": CHANNEL_LAYER_CAPACITY,
        },
    }
}

# The live socket's bounds (docs/live.md): topics per socket, bytes per message, messages per
# second (a bucket of LIVE_MESSAGE_BURST), how often a socket re-checks its topics, and the
# coalescing window per topic.
LIVE_MAX_SUBSCRIPTIONS = env.int("LIVE_MAX_SUBSCRIPTIONS", default=250)
LIVE_MAX_MESSAGE_BYTES = env.int("LIVE_MAX_MESSAGE_BYTES", default=16384)
LIVE_MESSAGE_RATE = env.float("LIVE_MESSAGE_RATE", default=5.0)
LIVE_MESSAGE_BURST = env.float("LIVE_MESSAGE_BURST", default=20.0)
LIVE_RECHECK_SECONDS = env.float("LIVE_RECHECK_SECONDS", default=3.0)
LIVE_COALESCE_SECONDS = env.float("LIVE_COALESCE_SECONDS", default=1.0)
LIVE_GATHER_SECONDS = env.float("LIVE_GATHER_SECONDS", default=0.1)
# /metrics (Prometheus): a bearer token; unset, only loopback clients may scrape.
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_DEFAULT_QUEUE = env.str("CELERY_QUEUE", default="console")
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_TIMEZONE = TIME_ZONE
# The safety-net cycle interval; event triggers do the real work.
SCHEDULER_BEAT_SECONDS: float = env.float("SCHEDULER_BEAT_SECONDS", default=5.0)
# The beat skips its cycle while nothing changed (scheduling.changes), but runs one at least
# every this many beats whatever was recorded: the safety net for a change nobody recorded.
SCHEDULER_FULL_CYCLE_BEATS: int = env.int("SCHEDULER_FULL_CYCLE_BEATS", default=12)
# The Celery worker's niceness (console/celery.py): 0 runs it level with the web processes.
WORKER_NICENESS: int = env.int("WORKER_NICENESS", default=5)
# Allocation history (scheduling.history): a sample per quota whose figures a cycle changed,
# kept this long and at most this many rows, pruned by the cycle at most once a minute.
SCHEDULER_ALLOCATION_HISTORY_HOURS: float = env.float("SCHEDULER_ALLOCATION_HISTORY_HOURS", default=168.0)
SCHEDULER_ALLOCATION_HISTORY_MAX_ROWS: int = env.int("SCHEDULER_ALLOCATION_HISTORY_MAX_ROWS", default=500_000)
SCHEDULER_ALLOCATION_HISTORY_PRUNE_SECONDS: float = 60.0
# A pending job whose only change is its place in the queue has that written at most this often
# (scheduling.pending_reasons.positions_held_until); a new reason is written by the cycle that makes it.
SCHEDULER_POSITION_REFRESH_SECONDS: float = env.float("SCHEDULER_POSITION_REFRESH_SECONDS", default=2.0)
HEARTBEAT_SECONDS: float = env.float("HEARTBEAT_SECONDS", default=10.0)
# The node agent (AGENT.md): how often agents beat, and when a silent node is lost. A node with no
# beat for NODE_LOST_SECONDS goes not ready; NODE_LOST_GRACE_SECONDS later its jobs are requeued.
AGENT_HEARTBEAT_SECONDS: float = env.float("AGENT_HEARTBEAT_SECONDS", default=2.0)
# After a beat that freed devices (a process exited, a stop completed), the agent's next beat comes
# this soon, so that what the cycle places on the node next starts within about this long.
AGENT_FOLLOW_UP_SECONDS: float = env.float("AGENT_FOLLOW_UP_SECONDS", default=1.0)
NODE_LOST_SECONDS: float = env.float("NODE_LOST_SECONDS", default=30.0)
NODE_LOST_GRACE_SECONDS: float = env.float("NODE_LOST_GRACE_SECONDS", default=30.0)
# A Slurm cluster (docs/slurm.md): with SLURM_CONF set (the path of its slurm.conf), the console
# keeps its nodes and runs the jobs placed there as Slurm jobs. Every client command is given
# SLURM_COMMAND_SECONDS; the inventory is read at most every SLURM_SYNC_SECONDS. Jobs write their
# output under SLURM_OUTPUT_DIR, a directory the compute nodes and the console both see.
SLURM_CONF: str = env.str("SLURM_CONF", default="")
SLURM_COMMAND_SECONDS: float = env.float("SLURM_COMMAND_SECONDS", default=10.0)
SLURM_SYNC_SECONDS: float = env.float("SLURM_SYNC_SECONDS", default=2.0)
SLURM_OUTPUT_DIR: str = env.str("SLURM_OUTPUT_DIR", default=str(BASE_DIR / "var" / "slurm"))
# A replica an agent was asked to start and has not reported running (or exited) this many
# heartbeats later goes back to the queue, and its node shows a warning (a start lost on the way,
# or refused by the agent: a state directory it cannot write, a fork that fails).
AGENT_START_BEATS: int = env.int("AGENT_START_BEATS", default=3)
if AGENT_START_BEATS < 1:
    raise ConfigError(f"AGENT_START_BEATS must be at least 1 heartbeat, not {AGENT_START_BEATS}.")
# The embedded default may start one local agent beside web, worker and beat, on an agent node of
# its own, so that a newcomer sees real processes run (docs/agent.md): on stand-in GPUs
# (--fake-gpus N), or on the host's own through NVML when CONSOLE_LOCAL_AGENT_GPUS is `nvml` (None).
CONSOLE_LOCAL_AGENT: bool = env.bool("CONSOLE_LOCAL_AGENT", default=False)
CONSOLE_LOCAL_AGENT_GPUS: int | None = local_agent_gpus(env.str("CONSOLE_LOCAL_AGENT_GPUS", default=""))
# Per-GPU telemetry (docs/telemetry.md): the simulated nodes' sampling interval, and how long
# each level is kept (samples, then 1-minute averages, then 1-hour averages).
TELEMETRY_SAMPLE_SECONDS: float = env.float("TELEMETRY_SAMPLE_SECONDS", default=5.0)
# Node agents' GPU readings are written together, at most this late (telemetry.services).
AGENT_SAMPLES_FLUSH_SECONDS: float = env.float("AGENT_SAMPLES_FLUSH_SECONDS", default=1.0)
# The live changes of the jobs that agents' beats end are sent together, at most this late
# (scheduling.events.published_later); 0 sends each beat's before its answer.
AGENT_PUBLISH_FLUSH_SECONDS: float = env.float("AGENT_PUBLISH_FLUSH_SECONDS", default=0.25)
TELEMETRY_RAW_RETENTION_HOURS: float = env.float("TELEMETRY_RAW_RETENTION_HOURS", default=1.0)
TELEMETRY_MINUTE_RETENTION_DAYS: float = env.float("TELEMETRY_MINUTE_RETENTION_DAYS", default=7.0)
TELEMETRY_HOUR_RETENTION_DAYS: float = env.float("TELEMETRY_HOUR_RETENTION_DAYS", default=90.0)
TELEMETRY_DOWNSAMPLE_SECONDS: float = 60.0
# A GPU with no sample this recent shows no reading (its node stopped reporting).
TELEMETRY_STALE_SECONDS: float = env.float("TELEMETRY_STALE_SECONDS", default=60.0)
TELEMETRY_SIMULATED_GPU_MEMORY_MIB: int = env.int("TELEMETRY_SIMULATED_GPU_MEMORY_MIB", default=81_920)
TELEMETRY_MAX_SAMPLES_PER_CALL: int = 1_024
HEARTBEAT_MAX_AGE_SECONDS: float = 60.0

# Production hardening: only when DEBUG is off, so `check --deploy` is clean there.
if not DEBUG:
    SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_CONTENT_TYPE_NOSNIFF = True
    X_FRAME_OPTIONS = "DENY"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {"outage_without_traceback": {"()": "console.log_filters.OutageWithoutTraceback"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["outage_without_traceback"]}
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # One line per task received and done (the executor ticks every second) drowns the rest.
        "celery.app.trace": {"level": "WARNING"},
        "celery.worker.strategy": {"level": "WARNING"},
        "celery.beat": {"level": "WARNING"},
        # axes logs every sign-in at INFO; its lockouts are WARNING and still show.
        "axes": {"level": "WARNING"},
    },
}

# Beat's safety net: a scheduling cycle every few seconds, and the simulated executor's clock tick
# (event triggers run cycles at once; these only catch what a lost trigger missed).
# Beat keeps its schedule in memory (Celery's base Scheduler), not in a shelve file: every entry
# is an interval of seconds, so there is nothing worth remembering across restarts, and a file
# can be missing (var/ exists only with the SQLite default, so beat died on a fresh clone with
# DATABASE_URL set) or half-written (beat then logs a "corrupted schedule" traceback).
CELERY_BEAT_SCHEDULER = "celery.beat:Scheduler"
CELERY_BEAT_SCHEDULE = beat_schedule(
    cycle_seconds=SCHEDULER_BEAT_SECONDS, tick_seconds=env.float("EXECUTOR_TICK_SECONDS", default=1.0)
) | telemetry_beat_schedule(sample_seconds=TELEMETRY_SAMPLE_SECONDS, downsample_seconds=TELEMETRY_DOWNSAMPLE_SECONDS)
