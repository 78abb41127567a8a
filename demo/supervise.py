"""Keeping `make web`'s processes running: one that exits (a crash, ``kill -9``, the OOM killer) is started
again, after a delay that doubles while it keeps dying, and each restart is logged (docs/operations.md#the-web-tier).

What is left of its process group is killed first: gunicorn's workers outlive a killed master for a moment
(holding database connections and the LISTEN session), and nginx's workers keep serving their ``reuseport``
sockets without one; a new master must not share the port with them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

#: The first restart waits this long; each quick death after it doubles the delay, up to MAX_DELAY.
FIRST_DELAY = 0.5
MAX_DELAY = 30.0
#: A process that ran this long before it died is restarted after FIRST_DELAY again.
STABLE_SECONDS = 60.0


def backoff(failures: int) -> float:
    """Seconds before restart number ``failures`` (1, 2, …) of a process that keeps dying quickly."""
    return min(MAX_DELAY, FIRST_DELAY * 2 ** max(0, failures - 1))


@dataclass
class Supervised:
    """One process kept running: ``spawn()`` starts it again."""

    name: str
    spawn: Callable[[], subprocess.Popen]
    started_at: float = field(default_factory=time.monotonic)
    failures: int = 0  # quick deaths in a row
    due_at: float | None = None  # when it is to be started again (None: running)


class Supervisor:
    """Restarts the processes of ``processes`` (name → Popen, updated in place) that exit, with backoff.

    ``check()`` is called in the launcher's loop: it notices an exit, schedules the restart and starts the
    process when its delay has passed. ``log`` receives one line per event."""

    def __init__(
        self,
        processes: dict[str, subprocess.Popen],
        spawns: dict[str, Callable[[], subprocess.Popen]],
        *,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.processes = processes
        self.watched = {name: Supervised(name=name, spawn=spawn) for name, spawn in spawns.items()}
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.restarts: list[str] = []

    def check(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for name, watched in self.watched.items():
            process = self.processes[name]
            if watched.due_at is None and process.poll() is not None:
                _kill_group(process)
                ran = now - watched.started_at
                watched.failures = 1 if ran >= STABLE_SECONDS else watched.failures + 1
                delay = backoff(watched.failures)
                watched.due_at = now + delay
                self.log(
                    f"web: {name} exited ({_how(process.returncode)}) after {ran:.1f} s; restarting it in {delay:.1f} s"
                )
            if watched.due_at is not None and now >= watched.due_at:
                self.processes[name] = watched.spawn()
                watched.started_at, watched.due_at = now, None
                self.restarts.append(name)
                self.log(f"web: {name} restarted (pid {self.processes[name].pid})")


def _how(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        return f"signal {signal.Signals(-returncode).name}"
    return f"code {returncode}"


def _kill_group(process: subprocess.Popen) -> None:
    """SIGKILL what is left of a dead process's group (its workers); each was started in a session of its own."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
