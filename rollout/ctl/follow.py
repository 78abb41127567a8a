"""Following a rollout until it decides: ``wait`` (exit codes a pipeline branches on) and ``status --watch``.

Both read ``GET /rollouts/{id}/`` every ``--interval`` seconds. An answer that says "later" (no answer at all,
429, 502, 503, 504) is asked again, after the answer's ``Retry-After`` when it gives one, for as long as it
takes: a database restart or a redeploy is ridden out until ``--timeout`` (when the last read failed then, the
error is the outcome: exit 1). Any other refusal ends the command at once with exit 1.
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
#: ``labels``: the selector matched no node (nothing was changed).
EXIT_NO_MATCH = 5

#: What ``wait`` and ``status --watch`` answer for each state that ends them (``superseded``: another rollout
#: took its nodes over, docs/ctl.md#rolling-back-and-forward); any other state keeps them going.
VERDICTS = {
    "completed": EXIT_OK,
    "paused": EXIT_PAUSED,
    "aborted": EXIT_STOPPED,
    "denied": EXIT_STOPPED,
    "superseded": EXIT_STOPPED,
}


def readings(
    api: Api, rollout_id: str, *, interval: float, timeout: float | None, warn: Callable[[ApiError], None]
) -> Iterator[dict[str, Any]]:
    """The rollout, read again every ``interval`` seconds (or after a transient answer's ``Retry-After``, when
    longer); the iteration ends when ``timeout`` has passed, an outage included (the caller exits 4: the
    rollout was not seen to finish in time). ``warn`` hears each transient refusal."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        pause = interval
        try:
            rollout = api.get(f"rollouts/{rollout_id}/")
        except ApiError as exc:
            if not exc.transient:
                raise
            warn(exc)
            pause = max(interval, exc.retry_after or 0.0)
        else:
            yield rollout
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            pause = min(pause, left)
        time.sleep(pause)


class Warnings:
    """Transient refusals on stderr, once per run of the same code (a 10-minute outage is not 300 lines), and
    a line when the server answers again."""

    def __init__(self, out: Output) -> None:
        self.out = out
        self.last = ""

    def __call__(self, exc: ApiError) -> None:
        if exc.code != self.last:
            later = f" (Retry-After: {exc.retry_after:g} s)" if exc.retry_after is not None else ""
            self.out.errors.print(f"warning: {exc}{later}; asking again until it answers")
            self.last = exc.code

    def answered(self) -> None:
        if self.last:
            self.out.errors.print("the server answers again")
            self.last = ""


def wait(api: Api, out: Output, rollout_id: str, *, interval: float, timeout: float | None) -> int:
    """Exit 0 completed, 2 paused, 3 aborted, denied or superseded, 4 when ``timeout`` passes first."""
    last: dict[str, Any] | None = None
    shown = ""
    warnings = Warnings(out)
    for rollout in readings(api, rollout_id, interval=interval, timeout=timeout, warn=warnings):
        warnings.answered()
        last = rollout
        line = progress_line(rollout)
        if not out.as_json and line != shown:
            out.console.print(line, soft_wrap=True)
            shown = line
        if rollout["state"] in VERDICTS:
            if out.as_json:
                out.json(rollout)
            return VERDICTS[rollout["state"]]
    return _timed_out(out, last, timeout)


def _timed_out(out: Output, last: dict[str, Any] | None, timeout: float | None) -> int:
    if out.as_json and last is not None:
        out.json(last)
    out.errors.print(f"timed out after {timeout:g} s: the rollout is still {last['state'] if last else 'unread'}")
    return EXIT_TIMED_OUT


def watch(
    api: Api,
    out: Output,
    rollout_id: str,
    *,
    interval: float,
    timeout: float | None,
    draw: Callable[[dict[str, Any]], Any] | None = None,
    names: Mapping[str, str] | None = None,
) -> int:
    """Redraw the rollout until it finishes or pauses, then exit as ``wait`` does: 0 completed, 2 paused,
    3 aborted, denied or superseded, 4 when ``timeout`` passes first. ``draw`` renders a reading (default: the
    rollout and its waves)."""
    render = draw or (lambda rollout: rollout_view(rollout, names or {}))
    rollout: dict[str, Any] | None = None
    warnings = Warnings(out)
    with Live(console=out.console, refresh_per_second=4) if not out.as_json else nullcontext() as live:
        for rollout in readings(api, rollout_id, interval=interval, timeout=timeout, warn=warnings):
            warnings.answered()
            if live is not None:
                live.update(render(rollout))
            if rollout["state"] in VERDICTS:
                break
        else:
            return _timed_out(out, rollout, timeout)
    assert rollout is not None  # the loop ended on a finished rollout
    if out.as_json:
        out.json(rollout)
    return VERDICTS[rollout["state"]]
