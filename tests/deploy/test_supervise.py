"""`make web`'s supervisor (demo/supervise.py): a process that exits is started again, after a delay that
doubles while it keeps dying quickly and starts over once it ran a while; each exit and restart is logged."""

from __future__ import annotations

import subprocess
import sys

from demo.supervise import MAX_DELAY, STABLE_SECONDS, Supervisor, backoff


def exits_at_once() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"], start_new_session=True)


def test_the_delay_doubles_up_to_its_maximum():
    assert [backoff(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
    assert backoff(50) == MAX_DELAY


def test_an_exited_process_is_restarted_after_its_delay_and_logged():
    lines: list[str] = []
    processes = {"gunicorn": exits_at_once()}
    processes["gunicorn"].wait()
    supervisor = Supervisor(processes, {"gunicorn": exits_at_once}, log=lines.append)
    start = supervisor.watched["gunicorn"].started_at
    first = processes["gunicorn"]
    supervisor.check(now=start + 1)  # it died 1 s after its start: restart in 0.5 s
    assert processes["gunicorn"] is first
    assert lines == ["web: gunicorn exited (code 3) after 1.0 s; restarting it in 0.5 s"]
    supervisor.check(now=start + 1.4)
    assert processes["gunicorn"] is first
    supervisor.check(now=start + 1.5)
    assert processes["gunicorn"] is not first
    assert lines[-1] == f"web: gunicorn restarted (pid {processes['gunicorn'].pid})"
    processes["gunicorn"].wait()
    supervisor.check(now=start + 2)  # dead again at once: twice the delay
    assert lines[-1].endswith("restarting it in 1.0 s")
    supervisor.check(now=start + 3)
    processes["gunicorn"].wait()
    supervisor.check(now=start + 3 + STABLE_SECONDS)  # it ran a minute: the first delay again
    assert lines[-1].endswith("restarting it in 0.5 s")
    assert supervisor.restarts == ["gunicorn", "gunicorn"]
