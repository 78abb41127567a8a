"""Following a rollout until it decides: ``wait`` (exit codes a pipeline branches on) and ``status --watch``.

Both read ``GET /rollouts/{id}/`` every ``--interval`` seconds. An answer that says "later" (no answer,
429, 502, 503, 504) is asked again, up to ``TRANSIENT_TRIES`` times in a row (or until ``--timeout``, when
that comes first: then too the error is the outcome); any other refusal ends the command with exit 1.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import nullcontext
from typing import Any

from rich.live import Live

from rollout.ctl.client import Api, ApiError
from rollout.ctl.show import Output, progress_line, rollout_view

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_PAUSED = 2
EXIT_STOPPED = 3
EXIT_TIMED_OUT = 4

FINISHED = frozenset({"completed", "aborted", "denied"})
#: What ``wait`` answers for each state that ends it; any other state keeps it waiting.
VERDICTS = {"completed": EXIT_OK, "paused": EXIT_PAUSED, "aborted": EXIT_STOPPED, "denied": EXIT_STOPPED}
TRANSIENT_TRIES = 5


def readings(
    api: Api, rollout_id: str, *, interval: float, timeout: float | None, warn: Callable[[ApiError], None]
) -> Iterator[dict[str, Any]]:
    """The rollout, read again every ``interval`` seconds; the iteration ends when ``timeout`` has passed, or
    raises the last read's error when that read failed (a server that stopped answering is an error, not a
    rollout still running)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    failures = 0
    while True:
        failed: ApiError | None = None
        try:
            rollout = api.get(f"rollouts/{rollout_id}/")
        except ApiError as exc:
            failures += 1
            if not exc.transient or failures >= TRANSIENT_TRIES:
                raise
            warn(exc)
            failed = exc
        else:
            failures = 0
            yield rollout
        pause = interval
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                if failed is not None:
                    raise failed
                return
            pause = min(pause, left)
        time.sleep(pause)


def _warn(out: Output) -> Callable[[ApiError], None]:
    return lambda exc: out.errors.print(f"warning: {exc}; asking again")


def wait(api: Api, out: Output, rollout_id: str, *, interval: float, timeout: float | None) -> int:
    """Exit 0 completed, 2 paused, 3 aborted or denied, 4 when ``timeout`` passes first."""
    last: dict[str, Any] | None = None
    shown = ""
    for rollout in readings(api, rollout_id, interval=interval, timeout=timeout, warn=_warn(out)):
        last = rollout
        line = progress_line(rollout)
        if not out.as_json and line != shown:
            out.console.print(line, soft_wrap=True)
            shown = line
        if rollout["state"] in VERDICTS:
            if out.as_json:
                out.json(rollout)
            return VERDICTS[rollout["state"]]
    if out.as_json and last is not None:
        out.json(last)
    out.errors.print(f"timed out after {timeout:g} s: the rollout is still {last['state'] if last else 'unread'}")
    return EXIT_TIMED_OUT


def watch(api: Api, out: Output, rollout_id: str, *, interval: float, names: Mapping[str, str]) -> int:
    """Redraw the waves until the rollout finishes (completed, aborted or denied); a pause does not end it."""
    rollout: dict[str, Any] = {}
    with Live(console=out.console, refresh_per_second=4) if not out.as_json else nullcontext() as live:
        for rollout in readings(api, rollout_id, interval=interval, timeout=None, warn=_warn(out)):
            if live is not None:
                live.update(rollout_view(rollout, names))
            if rollout["state"] in FINISHED:
                break
    if out.as_json:
        out.json(rollout)
    return EXIT_OK
