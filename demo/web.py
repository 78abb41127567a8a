"""``make web``: the production web tier on this machine, without Docker (docs/operations.md#the-web-tier).

nginx (Debian's package) in front of gunicorn serving ``project.asgi`` as ``gunicorn.conf.py`` runs it (uvicorn
workers, ``WEB_WORKERS`` x ``WEB_THREADS``, 3 x 4 as in docker-compose.yml), on ``127.0.0.1:${WEB_PORT:-8000}``:
agent sessions, plain and held, answered in async code (docs/architecture.md#watch). nginx runs with the
repository's ``docker/nginx.conf``, its ``${NAMES}`` filled in here as compose's envsubst fills them, as an
unprivileged-port foreground master with its own pid file and temporary files under ``$ROLLOUT_RUN_DIR/web``
(never the system's nginx service). Settings come from the environment as the compose ``web`` service reads
them; ``ROLLOUT_DOWNLOADS_OFFLOAD`` defaults to ``accel`` here (nginx serves the downloads from
``ROLLOUT_MEDIA_ROOT``). Its children may open as many files as the hard limit allows: a held agent costs
nginx two descriptors and gunicorn one (docs/operations.md#the-web-tier).

    python -m demo.web [--port 8000] [--no-migrate] [--controller]

``--controller`` also runs a Celery worker and beat (the commands of docs/operations.md#the-stack), supervised
like gunicorn and nginx: without systemd or compose, one command keeps the whole server running. Leave it out
where they run as services of their own (the systemd units): a second beat would send every tick twice.

Metrics of every process in one place: ``PROMETHEUS_MULTIPROC_DIR`` (default ``$ROLLOUT_RUN_DIR/prometheus``) is
set for gunicorn (and the worker and beat), and cleared at start of every file no running process writes (a tier
killed with SIGKILL leaves its workers' live gauges: core/metrics.py ``forget_dead_processes``).

It migrates the database first (as compose's ``migrate`` service) and refuses to start when nginx's workers
could not read ``ROLLOUT_MEDIA_ROOT`` (every download would fail), saying what to change. nginx starts once
gunicorn listens. Then it runs in the foreground until SIGTERM or SIGINT (Ctrl-C), and only then stops both
(their whole process groups) and exits: a gunicorn or an nginx that exits meanwhile is started again, with
backoff, and logged (demo/supervise.py). The children also get SIGTERM if this process dies without stopping
them (Linux's parent-death signal).

Each application server behind nginx is an ``Upstream``: its command, its environment, and the ``${NAMES}`` of
docker/nginx.conf that carry its addresses. gunicorn's are two: its socket for every request (``APP_UPSTREAM``), and
one socket per worker for the agents' sessions (``AGENT_SERVERS``, ``WEB_WORKER_BIND``: core/worker_sockets.py).
Another application server is one more entry in ``upstreams()`` and one more ``upstream`` block in the config.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import os
import pwd
import re
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from core.worker_sockets import slot_addresses, web_workers
from demo.processes import gunicorn_command, stop
from demo.supervise import Supervisor

BASE_DIR = Path(__file__).resolve().parent.parent
NGINX_CONF = BASE_DIR / "docker" / "nginx.conf"
PLACEHOLDER = re.compile(r"\$\{([A-Z][A-Z0-9_]*)\}")
DEFAULT_PORT = 8000
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Upstream:
    """An application server behind nginx: docker/nginx.conf's ``values`` (its addresses), the ``addresses`` it
    listens on once started, and what it runs with (``env``: added to the tier's)."""

    name: str
    values: dict[str, str]
    addresses: list[str]
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)


def upstreams(run_dir: Path, *, workers: int) -> list[Upstream]:
    """gunicorn on a unix socket, and one socket per worker (``workers``: ``WEB_WORKERS``)."""
    unix_socket = f"unix:{run_dir / 'gunicorn.sock'}"
    worker_bind = f"unix:{run_dir / 'worker-{slot}.sock'}"
    per_worker = slot_addresses(worker_bind, workers)
    return [
        Upstream(
            name="gunicorn",
            values={
                "APP_UPSTREAM": unix_socket,
                "AGENT_SERVERS": " ".join(f"server {address} max_fails=0;" for address in per_worker),
            },
            addresses=[unix_socket, *per_worker],
            command=gunicorn_command(bind=unix_socket),
            env={"WEB_WORKER_BIND": worker_bind},
        )
    ]


def raise_open_files_limit() -> int:
    """This process's soft limit of open files raised to its hard limit (its children inherit it): each held
    agent session costs nginx two descriptors and gunicorn one. Returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def nginx_worker_user() -> pwd.struct_passwd | None:
    """Who nginx's workers run as when they are not this process's user: ``nobody`` under a root master
    (docker/nginx.conf sets no ``user``); None otherwise (they run as this user, who created the media root)."""
    return pwd.getpwnam("nobody") if os.geteuid() == 0 else None


def unsearchable(path: Path, *, uid: int, gids: set[int]) -> Path | None:
    """The first folder on the way to ``path`` (``path`` included) that user ``uid`` (in groups ``gids``) may not
    enter, if any: nginx opens a binary by its path, so it needs to search every folder above it."""
    if uid == 0:
        return None
    for folder in [*reversed(path.parents), path]:
        mode = folder.stat()
        bit = stat.S_IXUSR if mode.st_uid == uid else stat.S_IXGRP if mode.st_gid in gids else stat.S_IXOTH
        if not mode.st_mode & bit:
            return folder
    return None


def refuse_an_unreachable_media_root(media_root: Path) -> None:
    """SystemExit with what to change when nginx's workers could not reach ``media_root`` (every download would
    be refused by nginx)."""
    user = nginx_worker_user()
    if user is None:
        return
    blocked = unsearchable(media_root, uid=user.pw_uid, gids=set(os.getgrouplist(user.pw_name, user.pw_gid)))
    if blocked is not None:
        mode = stat.S_IMODE(blocked.stat().st_mode)
        raise SystemExit(
            f"web: nginx's workers run as {user.pw_name} and cannot enter {blocked} (mode {mode:04o}), so they "
            f"could not serve one binary from ROLLOUT_MEDIA_ROOT ({media_root}). Run `chmod o+x {blocked}`, "
            f"or set ROLLOUT_MEDIA_ROOT to a folder {user.pw_name} can reach."
        )


def nginx_binary() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
    if found is None:
        raise SystemExit("nginx is not installed: run `bash scripts/system-deps.sh nginx` (as root) or `make web`")
    return found


def render_nginx_conf(values: Mapping[str, str], template: Path = NGINX_CONF) -> str:
    """docker/nginx.conf with every ``${NAME}`` replaced by ``values[NAME]``; a name without a value fails."""
    text = template.read_text()
    missing = sorted(set(PLACEHOLDER.findall(text)) - set(values))
    if missing:
        raise ValueError(f"{template.name} needs values for {', '.join(missing)}")
    return PLACEHOLDER.sub(lambda match: values[match[1]], text)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _spawn(command: list[str], env: Mapping[str, str], log: Path | None) -> subprocess.Popen:
    stream = log.open("ab") if log else None  # None: the launcher's own stdout/stderr
    return subprocess.Popen(  # noqa: S603 - our interpreter, gunicorn, nginx
        command,
        cwd=BASE_DIR,
        env=dict(env),
        stdout=stream,
        stderr=subprocess.STDOUT if stream else None,
        start_new_session=True,  # its own process group: stopped with its children
        preexec_fn=_die_with_parent,  # the launcher starts no threads: safe between fork and exec
    )


@dataclass
class WebTier:
    """nginx and the upstreams it proxies to, running; ``stop()`` ends them all."""

    url: str
    run_dir: Path
    processes: dict[str, subprocess.Popen]
    log_dir: Path | None = None  # each process's output, when not the launcher's own
    # How each process is started (again, by the supervisor of ``main``).
    spawns: dict[str, Callable[[], subprocess.Popen]] = field(default_factory=dict)

    def exited(self) -> str | None:
        """The name of a process that has exited, if any."""
        return next((name for name, process in self.processes.items() if process.poll() is not None), None)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM each process group (nginx: fast shutdown; gunicorn: graceful), SIGKILL what is left."""
        stop(*self.processes.values(), timeout=timeout)


def start(
    env: Mapping[str, str],
    *,
    port: int,
    media_root: Path,
    run_dir: Path,
    host: str = "127.0.0.1",
    access_log: str = "/dev/null",
    log_dir: Path | None = None,
    timeout: float = 60.0,
) -> WebTier:
    """Start the upstreams and nginx in front of them; return once nginx answers through gunicorn.

    ``access_log``: where nginx writes its access log (docker/nginx.conf's ``timed`` format)."""
    _refuse_a_taken_port(host, port)
    refuse_an_unreachable_media_root(media_root)
    shutil.rmtree(run_dir, ignore_errors=True)
    (run_dir / "nginx").mkdir(parents=True)
    raise_open_files_limit()
    env = {**env, "ROLLOUT_MEDIA_ROOT": str(media_root)}
    servers = upstreams(run_dir, workers=web_workers(env))
    values = {
        "NGINX_LISTEN": f"{host}:{port}",
        "NGINX_RUN_DIR": str(run_dir / "nginx"),
        "NGINX_ACCESS_LOG": access_log,
        "ROLLOUT_MEDIA_ROOT": str(media_root).rstrip("/"),
        **{name: value for server in servers for name, value in server.values.items()},
    }
    config = run_dir / "nginx" / "nginx.conf"
    config.write_text(render_nginx_conf(values))
    processes: dict[str, subprocess.Popen] = {}
    tier = WebTier(url=f"http://{host}:{port}", run_dir=run_dir, processes=processes, log_dir=log_dir)
    nginx = [nginx_binary(), "-p", str(run_dir / "nginx"), "-c", str(config)]
    commands = {**{server.name: server.command for server in servers}, "nginx": nginx}
    environments = {server.name: {**env, **server.env} for server in servers}
    for name, command in commands.items():
        log = log_dir / f"{name}.log" if log_dir else None
        tier.spawns[name] = functools.partial(_spawn, command, environments.get(name, env), log)
    try:
        for server in servers:
            processes[server.name] = tier.spawns[server.name]()
        # nginx once every upstream listens: no "connect() failed" while gunicorn starts.
        addresses = [address for server in servers for address in server.addresses]
        _wait_until(lambda: all(_listens(address) for address in addresses), timeout=timeout, tier=tier)
        processes["nginx"] = tier.spawns["nginx"]()
        _wait_until(lambda: _answers(tier), timeout=timeout, tier=tier)
    except BaseException:
        tier.stop()
        raise
    return tier


def _refuse_a_taken_port(host: str, port: int) -> None:
    """nginx listens with ``reuseport``: a second nginx of the same user on the same port would share the
    connections with the first instead of failing to start, so a port in use is refused here."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as nginx: a port in TIME_WAIT is free
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise SystemExit(f"web: {host}:{port} is in use ({exc.strerror}); choose another WEB_PORT") from exc


def _listens(address: str) -> bool:
    """Whether an upstream's address (``unix:PATH`` or ``HOST:PORT``) accepts connections."""
    host, _, port = address.rpartition(":")
    unix = address.startswith("unix:")
    with socket.socket(socket.AF_UNIX if unix else socket.AF_INET) as probe:
        probe.settimeout(1)
        try:
            probe.connect(address.removeprefix("unix:") if unix else (host, int(port)))
        except OSError:
            return False
    return True


def _answers(tier: WebTier) -> bool:
    """Django answers through nginx (nginx alone answers 503 unavailable while gunicorn starts)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(tier.url + "/admin/login/", timeout=2):  # noqa: S310 - loopback
            return True
    except urllib.error.HTTPError as exc:
        return exc.code not in (502, 503, 504)
    except OSError:
        return False


def _wait_until(ready: Callable[[], bool], *, timeout: float, tier: WebTier) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        gone = tier.exited()
        if gone:
            raise SystemExit(f"web: {gone} exited with {tier.processes[gone].returncode} while starting")
        if time.monotonic() >= deadline:
            raise SystemExit(f"web: no answer on {tier.url} after {timeout:.0f} s")
        time.sleep(0.1)


def metrics_directory(run_dir: Path) -> Path:
    """``PROMETHEUS_MULTIPROC_DIR`` for the tier's processes (``$ROLLOUT_RUN_DIR/prometheus`` unless set), made, and
    cleared of the files of processes that no longer run (core/metrics.py ``forget_dead_processes``)."""
    from core.metrics import MULTIPROC_ENV, forget_dead_processes

    directory = Path(os.environ.get(MULTIPROC_ENV) or run_dir / "prometheus").resolve()
    directory.mkdir(parents=True, exist_ok=True)
    os.environ[MULTIPROC_ENV] = str(directory)
    forget_dead_processes(every_kind=True)
    return directory


def controller_spawns(env: Mapping[str, str]) -> dict[str, Callable[[], subprocess.Popen]]:
    """A Celery worker and beat, as docs/operations.md#the-stack runs them, their output the launcher's."""
    from demo.processes import CELERY

    worker = [*CELERY, "worker", "--loglevel=INFO"]
    beat = [*CELERY, "beat", "--scheduler=django_celery_beat.schedulers:DatabaseScheduler", "--pidfile=",
            "--loglevel=INFO"]  # fmt: skip
    commands = {"worker": worker, "beat": beat}
    return {name: functools.partial(_spawn, command, env, None) for name, command in commands.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make web", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get("WEB_PORT") or DEFAULT_PORT))
    parser.add_argument("--no-migrate", action="store_true", help="do not migrate the database first")
    parser.add_argument("--controller", action="store_true", help="also run and supervise a Celery worker and beat")
    options = parser.parse_args(argv)
    os.environ.setdefault("ROLLOUT_DOWNLOADS_OFFLOAD", "accel")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    from django.conf import settings  # the same settings gunicorn will read: one MEDIA_ROOT

    media_root, run_dir = Path(settings.MEDIA_ROOT).resolve(), Path(settings.RUN_DIR).resolve() / "web"
    media_root.mkdir(parents=True, exist_ok=True)
    if not options.no_migrate:  # without the metrics directory: migrate's files would outlive it
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=BASE_DIR, check=True)
    metrics = metrics_directory(Path(settings.RUN_DIR).resolve())
    stopping: list[int] = []

    def request_stop(signum: int, _frame: object) -> None:
        stopping.append(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, request_stop)
    tier = start(os.environ, port=options.port, media_root=media_root, run_dir=run_dir)
    try:
        if options.controller:
            for name, spawn in controller_spawns(os.environ).items():
                tier.spawns[name] = spawn
                tier.processes[name] = spawn()
        offload = os.environ["ROLLOUT_DOWNLOADS_OFFLOAD"]
        print(f"web: {tier.url} (nginx -> gunicorn; downloads offload={offload}; binaries in {media_root})")
        print(f"web: metrics of every process in {metrics} (PROMETHEUS_MULTIPROC_DIR)")
        running = ", ".join(tier.processes)
        print(f"web: Ctrl-C or SIGTERM stops it ({running}: one that exits meanwhile is restarted)", flush=True)
        supervisor = Supervisor(tier.processes, tier.spawns)
        while not stopping:
            supervisor.check()
            time.sleep(0.2)
    finally:
        tier.stop()
    print("web: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
