"""Start and stop the system's own processes (Celery worker and beat) for the demo and the tests.

They are started exactly as production starts them (see docker-compose.yml):
``celery -A project worker`` and ``celery -A project beat`` with django-celery-beat's
DatabaseScheduler; only the environment differs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
CELERY = [sys.executable, "-m", "celery", "-A", "project"]


def _spawn(args: list[str], env: Mapping[str, str], log_path: Path | None) -> subprocess.Popen:
    stream = log_path.open("ab") if log_path else subprocess.DEVNULL
    return subprocess.Popen(  # noqa: S603 - our own interpreter and module
        args,
        cwd=BASE_DIR,
        env={**os.environ, **env},
        stdout=stream,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: stopped with its children
    )


def celery_worker(
    env: Mapping[str, str],
    *,
    queue: str = "celery",
    concurrency: int = 2,
    log_path: Path | None = None,
    loglevel: str = "WARNING",
    deployed: bool = False,
) -> subprocess.Popen:
    """A worker on ``queue``: threads, without gossip and mingle (lighter and quicker to start, for the demo
    and the end-to-end tests). ``deployed``: exactly docker-compose.yml's command instead (the prefork pool,
    gossip, mingle and event heartbeats), consuming the environment's CELERY_TASK_DEFAULT_QUEUE."""
    if deployed:
        return _spawn([*CELERY, "worker", f"--loglevel={loglevel}", f"--concurrency={concurrency}"], env, log_path)
    return _spawn(
        [
            *CELERY,
            "worker",
            "--pool=threads",
            f"--concurrency={concurrency}",
            f"--queues={queue}",
            "--without-gossip",
            "--without-mingle",
            f"--loglevel={loglevel}",
        ],
        env,
        log_path,
    )


def celery_beat(
    env: Mapping[str, str], *, max_interval: int = 1, log_path: Path | None = None, loglevel: str = "WARNING"
) -> subprocess.Popen:
    return _spawn(
        [
            *CELERY,
            "beat",
            "--scheduler=django_celery_beat.schedulers:DatabaseScheduler",
            f"--max-interval={max(1, max_interval)}",
            "--pidfile=",
            f"--loglevel={loglevel}",
        ],
        env,
        log_path,
    )


def gunicorn_command(*, bind: str) -> list[str]:
    """gunicorn as docker-compose.yml's ``web`` runs it: everything else is gunicorn.conf.py's (the working
    directory's), with ``WEB_WORKERS`` and ``WEB_THREADS`` from the environment."""
    return [sys.executable, "-m", "gunicorn", "project.asgi:application", "--bind", bind]


def web_server(
    env: Mapping[str, str],
    *,
    port: int,
    workers: int | None = None,
    threads: int | None = None,
    log_path: Path | None = None,
    addresses: Sequence[str] = ("127.0.0.1",),
) -> subprocess.Popen:
    """The web tier on loopback as the compose file's ``web`` service runs it (``gunicorn_command``: gunicorn.conf.py's
    uvicorn workers serving ``project.asgi``), without nginx in front. ``workers`` and ``threads``
    set ``WEB_WORKERS`` and ``WEB_THREADS``; None keeps the environment's, else the defaults (3 x 4).
    ``addresses``: the loopback addresses it listens on (``port`` on each)."""
    sizes = {"WEB_WORKERS": workers, "WEB_THREADS": threads}
    first, *others = addresses
    return _spawn(
        [*gunicorn_command(bind=f"{first}:{port}"), *(f"--bind={address}:{port}" for address in others)],
        {**env, **{name: str(value) for name, value in sizes.items() if value is not None}},
        log_path,
    )


def stop(*processes: subprocess.Popen | None, timeout: float = 15.0) -> None:
    """SIGTERM each process (a warm shutdown: it stops its own children, as under docker stop), then SIGKILL
    what is left of its process group after ``timeout``: also the group of one that exited but that no one has
    reaped yet (an nginx master killed with SIGKILL leaves its workers serving). A process reaped earlier is
    left alone: its group number may belong to another process by now (whoever reaped it killed its group)."""
    started = [p for p in processes if p is not None and p.returncode is None]
    running = [p for p in started if p.poll() is None]
    for process in running:
        process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for process in started:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # children it left behind, or itself when it hung
        process.wait(timeout=5)


def wait_until(
    predicate: Callable[[], object], *, timeout: float = 20.0, poll: float = 0.1, what: str = "condition"
) -> None:
    """Poll ``predicate`` until it holds; TimeoutError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
