"""Prometheus metrics at ``/metrics`` (prometheus-client). See docs/operations.md, "Metrics".

Two kinds of metric:

- **State gauges**, computed from the database at scrape time by the
  collectors the apps register (``fleet.metrics.PoolCollector``,
  ``rollout.metrics.RolloutCollector``) in a constant number of queries
  (whatever the size of the fleet): nodes by upgrade state, active rollouts,
  and each pool's disruption budget (allowed, disrupted, nodes). Any web
  process answers the same; nothing has to be kept in memory.
- **The controller's tick duration**, ``rollout_tick_seconds``, a histogram
  (rollout/metrics.py) observed by each attempt of ``rollout.controller.tick.rollout_tick`` (a held
  rollout's attempt too, at once; not the wait for the holder) where ticks run:
  Celery worker processes, not the web process. With ``PROMETHEUS_MULTIPROC_DIR``
  set in the environment before the process starts (docker-compose.yml shares one
  volume between ``web`` and ``worker``, and one pid namespace: files are named
  after pids), every process writes its samples to files in that directory and
  ``/metrics`` sums them (prometheus-client's multiprocess mode). Without it, each process
  keeps its own samples and ``/metrics`` shows those of the web process only
  (ticks run in-process in tests and with CELERY_TASK_ALWAYS_EAGER).

The database may be down: the state gauges are then left out, the process metrics are still
served, and ``rollout_database_up`` says 0 (1 when every collector read the database). ``/metrics``
answers 200 either way, never 500: a scrape is how an outage is seen.

Access: with ``METRICS_TOKEN`` set it needs ``Authorization: Bearer <METRICS_TOKEN>``
(Prometheus: ``authorization: {credentials: ...}``). Unset, it answers 403
``metrics_disabled`` (it lists every tenant's slugs and pool names), unless
``METRICS_PUBLIC=1`` opens it deliberately.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Iterator
from pathlib import Path

import structlog
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, multiprocess
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from core.database import DATABASE_ERRORS
from core.env import env_bool, env_str

log = structlog.get_logger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
TOKEN_ENV = "METRICS_TOKEN"  # noqa: S105 (the name of the variable, not a secret)
PUBLIC_ENV = "METRICS_PUBLIC"


def mark_process_dead(pid: int) -> None:
    """A process writing to the multiprocess directory exited (gunicorn's ``child_exit``, Celery's
    ``worker_process_shutdown``): prometheus-client drops its live-gauge files. No-op without the directory."""
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]  # prometheus-client is untyped here


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs: a zombie (killed, not reaped yet: PID 1 of a container may reap late) does
    not."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        state = None
    if state is not None:
        return state not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: alive
    return True


def _pid_of(path: Path) -> int | None:
    """The pid a multiprocess file is named after (``gauge_livesum_1234.db``), if it is one of them."""
    tail = path.stem.rsplit("_", 1)[-1]
    return int(tail) if path.suffix == ".db" and tail.isdigit() else None


def forget_dead_processes(*, every_kind: bool = False) -> list[int]:
    """The processes whose files are in ``PROMETHEUS_MULTIPROC_DIR`` but that are no longer running (a tier killed
    with SIGKILL never ran gunicorn's ``child_exit``): their live gauges are forgotten (``mark_process_dead``), so
    ``fleet_watch_held`` counts the requests held now only. ``every_kind``: their counters' and histograms' files go
    too (``make web`` at its start: the directory cleared of everything no running process writes). Returns the
    pids forgotten. Called by gunicorn's ``on_starting`` (gunicorn.conf.py) and ``make web`` (demo/web.py)."""
    directory = os.environ.get(MULTIPROC_ENV)
    if not directory or not os.path.isdir(directory):
        return []
    dead: set[int] = set()
    for path in Path(directory).iterdir():
        pid = _pid_of(path)
        if pid is None or _alive(pid):
            continue
        dead.add(pid)
        if every_kind:
            path.unlink(missing_ok=True)
    for pid in dead:
        mark_process_dead(pid)
    return sorted(dead)


#: Collectors the apps register (in their AppConfig.ready) to compute state gauges at scrape time.
_collectors: list[Collector] = []


def register_collector(collector: Collector) -> None:
    """Add an app's scrape-time collector (idempotent: ready() may run twice in tests)."""
    if all(type(existing) is not type(collector) for existing in _collectors):
        _collectors.append(collector)


class _Forward:
    """The default registry (this process's own metrics), inside a per-scrape registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        return iter(self.registry.collect())


class _DatabaseCollectors:
    """The apps' scrape-time collectors, each read whole before the exposition is written: a database that does not
    answer leaves out the gauges of the collector it failed (and of the later ones: they all read it) and sets
    ``rollout_database_up`` to 0, instead of failing the scrape."""

    def __init__(self, collectors: list[Collector]) -> None:
        self.collectors = collectors

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        metrics: list[Metric] = []
        up = 1
        for collector in self.collectors:
            try:
                metrics.extend(list(collector.collect()))
            except DATABASE_ERRORS as exc:
                log.warning("metrics.database_unavailable", error=f"{type(exc).__name__}: {exc}"[:300])
                up = 0
                break
        yield from metrics
        yield GaugeMetricFamily(
            "rollout_database_up", "1 when the database answered this scrape's queries, 0 when it did not.", value=up
        )


def scrape_registry() -> CollectorRegistry:
    """What one scrape shows: the process metrics (or all processes' in multiprocess mode) and the fleet."""
    registry = CollectorRegistry(auto_describe=False)
    directory = os.environ.get(MULTIPROC_ENV)
    if directory:
        multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    else:
        registry.register(_Forward(REGISTRY))
    registry.register(_DatabaseCollectors(list(_collectors)))
    return registry


def _unauthorized(code: str, detail: str) -> JsonResponse:
    response = JsonResponse({"code": code, "detail": detail}, status=401)
    response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


@require_safe
def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: the Prometheus exposition (text format, or OpenMetrics when asked for)."""
    token = env_str(TOKEN_ENV)
    if not token and not env_bool(PUBLIC_ENV):
        return JsonResponse(
            {"code": "metrics_disabled", "detail": f"Set {TOKEN_ENV} (or {PUBLIC_ENV}=1) to serve /metrics."},
            status=403,
        )
    if token:
        header = request.headers.get("Authorization", "")
        if not header:
            return _unauthorized("not_authenticated", "Use 'Authorization: Bearer <METRICS_TOKEN>'.")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
            return _unauthorized("authentication_failed", "Wrong metrics token.")
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(scrape_registry()), content_type=content_type or CONTENT_TYPE_LATEST)
