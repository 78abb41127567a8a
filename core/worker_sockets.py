"""A listening socket of its own for each gunicorn worker, so that nginx sends an agent to the same process every time.

A web process answers a watching agent's arrival from what it read for that agent last time, without a statement
(fleet/watch/known.py), but only when the arrival comes to the process that read it. Every worker accepts on
gunicorn's one socket, and nginx reuses whichever upstream connection was freed last: during a rollout about three
upgrades in four sent an arrival to another process than the one that read the agent (docs/benchmarks.md), and
each such arrival cost a statement. So, when ``WEB_WORKER_BIND`` is set, gunicorn's master also opens one socket per
worker slot (``WEB_WORKERS`` of them), and each worker serves its slot's socket besides the shared one; nginx sends
the session location to those sockets, hashed by the agent's token (docker/nginx.conf, ``upstream agents``).

- ``WEB_WORKER_BIND`` is an address as gunicorn's ``--bind`` takes it: ``unix:/run/web/worker-{slot}.sock`` (the
  slot's number replaces ``{slot}``) or ``HOST:PORT`` (slot n listens on PORT + n).
- The master opens the sockets once and keeps them: a worker that dies is replaced in the same slot (the slot
  served by the fewest live workers), and meanwhile connections wait in the socket's backlog, never refused.
  They are among the master's listeners: when gunicorn stops, it closes them first, with its own.
- While gunicorn replaces every worker (a reload: new ones start before the old ones stop), two workers may share
  a slot's socket for a moment: the agent's next arrival reads the database, as it would have anyway.
- A worker closes the other slots' sockets it inherited: only the master and the slot's worker hold it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from gunicorn import sock as gunicorn_sockets
from gunicorn import util

SLOT = "{slot}"
#: Web processes when ``WEB_WORKERS`` is unset (docker-compose.yml's default).
DEFAULT_WEB_WORKERS = 3


def web_workers(environ: Mapping[str, str]) -> int:
    """How many web processes gunicorn runs (gunicorn.conf.py), and so how many slots there are."""
    return int(environ.get("WEB_WORKERS") or DEFAULT_WEB_WORKERS)


def slot_addresses(bind: str, slots: int) -> list[str]:
    """The address of each slot's socket, as ``bind`` says (the module docstring). ValueError: a unix address
    without ``{slot}``, or a TCP address without a port."""
    if bind.startswith("unix:"):
        if SLOT not in bind:
            raise ValueError(f"WEB_WORKER_BIND={bind!r}: a unix socket's path needs {SLOT} (one socket per worker)")
        return [bind.replace(SLOT, str(slot)) for slot in range(slots)]
    host, _, port = bind.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"WEB_WORKER_BIND={bind!r}: not unix:PATH nor HOST:PORT")
    return [f"{host}:{int(port) + slot}" for slot in range(slots)]


def least_used_slot(used: list[int], slots: int) -> int:
    """The slot a new worker takes: the one the fewest live workers serve (the lowest of those)."""
    counts = Counter(used)
    return min(range(slots), key=lambda slot: (counts[slot], slot))


def open_slot_sockets(server: Any, bind: str) -> list[Any]:
    """The master's sockets, one per slot: opened on the first call and kept among the arbiter's listeners, so that
    gunicorn closes them (a unix socket's file removed) as soon as it begins to stop, as it closes its own, and
    nothing waits in a backlog nobody will serve. Opened again when a reload replaced the listeners (a new bind)."""
    kept: list[Any] | None = getattr(server, "worker_slot_sockets", None)
    if kept and all(listener in server.LISTENERS for listener in kept):
        return kept
    # A master that gunicorn re-executed (USR2) inherited its predecessor's sockets, these among them.
    inherited = {listener.getsockname(): listener for listener in server.LISTENERS}
    listeners = []
    for address in slot_addresses(bind, server.num_workers):
        parsed = util.parse_address(address)
        kind = gunicorn_sockets.UnixSocket if isinstance(parsed, str) else gunicorn_sockets.TCPSocket
        listeners.append(inherited.get(parsed) or kind(parsed, server.cfg, server.log))
    server.worker_slot_sockets = listeners
    server.LISTENERS = [*server.LISTENERS, *(listener for listener in listeners if listener not in server.LISTENERS)]
    server.log.info("Listening per worker at: %s", ", ".join(str(listener) for listener in listeners))
    return listeners


def assign_slot(server: Any, worker: Any, bind: str) -> None:
    """In the master, before it forks ``worker``: the worker's slot, and the sockets it serves (gunicorn's own and
    its slot's)."""
    listeners = open_slot_sockets(server, bind)
    used = [other.worker_slot for other in server.WORKERS.values() if hasattr(other, "worker_slot")]
    worker.worker_slot = least_used_slot(used, len(listeners))
    shared = [listener for listener in server.LISTENERS if listener not in listeners]
    worker.sockets = [*shared, listeners[worker.worker_slot]]


def close_other_slots(server: Any, worker: Any) -> None:
    """In the forked worker: close the other slots' sockets it inherited (the master keeps them open), so that only
    the master and the slot's worker hold a slot's socket."""
    for slot, listener in enumerate(getattr(server, "worker_slot_sockets", None) or []):
        if slot != getattr(worker, "worker_slot", None):
            listener.sock.close()  # this process's descriptor only
