"""Settings for the test suite: the real ones, made safe to run in parallel.

Each pytest-xdist worker gets its own Redis database, Celery queue and Channels prefix, so
workers never see each other's heartbeats, locks or messages.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

from console.settings import *  # noqa: F403
from console.settings import CHANNEL_LAYER_CAPACITY, channel_layer_host
from console.settings import REDIS_URL as _CONFIGURED_REDIS_URL

_worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
_worker_index = int(_worker.removeprefix("gw") or 0)


def _with_database(url: str, index: int) -> str:
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return url
    return urlunsplit((parts.scheme, parts.netloc, f"/{index}", parts.query, parts.fragment))


REDIS_URL = _with_database(_CONFIGURED_REDIS_URL, 1 + _worker_index % 15)
CELERY_BROKER_URL = REDIS_URL
CELERY_TASK_DEFAULT_QUEUE = f"console-test-{_worker}"
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "console.channel_layer.ConsoleChannelLayer",
        "CONFIG": {
            "hosts": [channel_layer_host(REDIS_URL)],
            "prefix": f"test-{_worker}",
            "capacity": CHANNEL_LAYER_CAPACITY,
        },
    }
}
# Hashing passwords slowly protects real accounts, not test fixtures.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Hashing a password the production way takes a tenth of a second; the suite signs in thousands
# of times (the fuzz tests load the demo's seven users for each operation).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Each beat's GPU readings are written at once: a reading kept in the process's buffer would
# outlive its test's database rows and be written into the next test's.
AGENT_SAMPLES_FLUSH_SECONDS = 0.0
