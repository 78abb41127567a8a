"""How gunicorn runs the web tier, for every way it is started (compose, the image, ``make web``, the demo, the
tests, the benchmarks): gunicorn reads ./gunicorn.conf.py from its working directory, the repository root (/app
in the image), so a command line names only the application and the bind:

    gunicorn project.asgi:application --bind 0.0.0.0:8000

Options given on a command line (or in ``GUNICORN_CMD_ARGS``) override these; only benchmarks do, to run the
previous tier (``-k gthread`` serving ``project.wsgi``: benchmarks/watch.py's floor, the heartbeat probes).
docs/operations.md#the-web-tier.

The request line and headers are bounded by nginx in front (docker/nginx.conf, ``large_client_header_buffers``):
gunicorn's own ``limit_request_*`` settings apply to its HTTP parser only, which uvicorn's workers do not use, and
uvicorn's parser sets no bound. Run the tier behind that nginx. The body: core.middleware.BodySizeLimitMiddleware
refuses one over 1 MiB (413) without reading it whole, and nginx does first.
"""

import os

from core.worker_sockets import web_workers

# ASGI (project/asgi.py): agent sessions, plain and held, answered in async code on each worker's event loop;
# Django's views on WEB_THREADS threads per worker (docs/architecture.md#watch).
worker_class = "uvicorn_worker.UvicornWorker"
workers = web_workers(os.environ)
# A worker that has not told the arbiter it is alive for this long is killed and replaced (not a request
# timeout: a held request lasts up to 60 s on the event loop, which keeps notifying).
timeout = 60
# Idle keep-alive connections (nginx's upstream keepalive, agents sent to the tier directly) stay open
# longer than nginx keeps them idle (60 s) and longer than any client's pool: the client closes first, so
# a request is never sent on a connection this side is closing.
keepalive = 75
# The workers' liveness files on tmpfs (gunicorn's advice): a slow disk never makes the arbiter kill a worker.
_TMPFS = "/dev/shm"  # noqa: S108 - a tmpfs for gunicorn's liveness files, not a shared temporary file
worker_tmp_dir = _TMPFS if os.path.isdir(_TMPFS) else None
loglevel = (os.environ.get("LOG_LEVEL") or "info").lower()
# One more socket per worker, besides --bind, so that nginx sends each agent to the same process
# (core/worker_sockets.py; docker/nginx.conf's upstream agents). Unset: none.
worker_bind = os.environ.get("WEB_WORKER_BIND") or None


def on_starting(server) -> None:
    """The master starts: the live gauges of processes that are gone are forgotten (a tier killed with SIGKILL never
    ran ``child_exit``; docs/operations.md#metrics)."""
    from core.metrics import forget_dead_processes

    forget_dead_processes()


def pre_fork(server, worker) -> None:
    """The worker's slot, and its socket (opened by the master, once)."""
    if worker_bind:
        from core.worker_sockets import assign_slot

        assign_slot(server, worker, worker_bind)


def post_fork(server, worker) -> None:
    """In the worker: only its own slot's socket stays open."""
    if worker_bind:
        from core.worker_sockets import close_other_slots

        close_other_slots(server, worker)


def post_worker_init(worker) -> None:
    """The application is loaded: the garbage collector is tuned for serving (core/collector.py)."""
    from core.collector import tune_for_serving

    tune_for_serving()


def child_exit(server, worker) -> None:
    """prometheus-client's multiprocess mode: forget a dead worker's live gauges (docs/operations.md, Metrics)."""
    from core.metrics import mark_process_dead

    mark_process_dead(worker.pid)
