"""Binary delivery over real HTTP: the `make web` tier (nginx + gunicorn), Django alone, and object storage.

The web tier is started once for the session by demo/web.py, exactly as `make web` starts it (the
repository's docker/nginx.conf, gunicorn as gunicorn.conf.py runs it: uvicorn workers serving project.asgi,
3 processes x 4 threads), on the test database and a media directory the tests store binaries into.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from demo.processes import free_port
from demo.web import WebTier, start
from rollout.registry.binaries import release_binary_store
from rollout.registry.releases import release_register
from tests.databases import database_url
from tests.factories import manifest, pin, rollout_settings, signed

DOWNLOADS_PATH = "/api/compute/downloads"
ACCESS_LOG = "access.log"  # nginx's, in the web tier's log_dir


def world_readable_dir(prefix: str) -> Path:
    """A fresh directory nginx's workers (``nobody`` when the tests run as root) can traverse and read."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


def upstream_seconds(line: str) -> tuple[str, float | None]:
    """The path of one line of nginx's access log (docker/nginx.conf's ``timed`` format) and how long the
    application server took over it: the longest of its tries (nginx writes them "0.012, 0.003", or
    "0.012 : 0.003" across an internal redirect), None when nginx answered alone ("-")."""
    path = line.split('"')[1].split()[1]
    upstream = line.rsplit('"', 1)[1].split(maxsplit=1)[1]  # after the request's own time
    times = [float(value) for value in re.split(r"[,:]\s*", upstream.strip()) if value.strip() not in ("", "-")]
    return path, max(times) if times else None


@dataclass
class Stored:
    version: str
    platform: str
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def path(self) -> str:
        return f"{DOWNLOADS_PATH}/bcd/{self.version}/{self.platform}"


def store_release(version: str, data: bytes, *, sequence: int = 1, platform: str = "linux-amd64") -> Stored:
    """Register a signed release whose one binary is ``data``, and store its bytes."""
    binaries = {platform: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}}
    release_register(envelope=signed(manifest(version, sequence, binaries=binaries)))
    release_binary_store(version=version, platform=platform, source=io.BytesIO(data))
    return Stored(version=version, platform=platform, data=data)


@pytest.fixture(scope="package")
def web_media_root() -> Iterator[Path]:
    path = world_readable_dir("rollout-media-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="package")
def web_tier(django_db_setup, django_db_blocker, web_media_root) -> Iterator[WebTier]:
    """`make web`'s tier on the test database, downloads offloaded to nginx (accel), for this package's tests.

    Stopped when they are done: its processes keep database connections (its threads', its LISTEN one) that
    the other packages' tests, which count and kill them, must not see."""
    with django_db_blocker.unblock():
        url = database_url()
    work = world_readable_dir("rollout-web-")
    logs = work / "logs"
    logs.mkdir()
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "ROLLOUT_RUN_DIR": str(work / "run"),
        "ROLLOUT_DOWNLOADS_OFFLOAD": "accel",
        "ROLLOUT_RELEASE_PINS": pin(0),
        "FLEET_HEARTBEAT_SECONDS": "10",
        "LOG_LEVEL": "WARNING",
        # Compose's web: 3 processes x 4 threads (fewer threads than the load rule's concurrent downloads).
        "WEB_WORKERS": "3",
        "WEB_THREADS": "4",
        # /metrics sums the three processes' gauges (the held sessions' tests read fleet_watch_held).
        "PROMETHEUS_MULTIPROC_DIR": str(work / "prometheus"),
        "METRICS_PUBLIC": "1",
    }
    (work / "prometheus").mkdir()
    tier = start(
        env,
        port=free_port(),
        media_root=web_media_root,
        run_dir=work / "run" / "web",
        log_dir=logs,
        access_log=str(logs / ACCESS_LOG),  # how long gunicorn took over each request: the load rule reads it
    )
    try:
        yield tier
    finally:
        tier.stop()
        for log in sorted(logs.iterdir()):
            text = log.read_text(errors="replace")[-3000:]
            if "Traceback" in text or "[error]" in text or "[emerg]" in text:
                print(f"--- {log.name} ---\n{text}")
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(params=["django", "nginx"])
def base_url(request, delivery_settings) -> str:
    """Each path to the bytes: Django alone (pytest-django's live server, offload=none), and the `make web`
    tier (nginx moves the bytes: X-Accel-Redirect)."""
    if request.param == "django":
        return request.getfixturevalue("live_server").url
    return request.getfixturevalue("web_tier").url


@pytest.fixture
def delivery_settings(settings, web_media_root):
    """This process stores binaries where the web tier serves them from."""
    settings.ROLLOUT = rollout_settings()
    settings.MEDIA_ROOT = web_media_root
    settings.ROLLOUT_DOWNLOADS_OFFLOAD = "none"
    return settings
