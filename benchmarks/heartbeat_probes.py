"""What the benchmarks count: SQL statements per heartbeat in the server (a WSGI wrapper gunicorn loads),
the database's commits and backends, the CPU of a changing set of processes, the peak memory and CPU of
process trees (``ProcessSampler``: the efficiency, delivery and watch benchmarks)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

QUERY_DIR_ENV = "BENCH_QUERY_DIR"
SESSION_PATH = "/api/compute/agent/session"


# --- the server side: a WSGI wrapper counting SQL per heartbeat (imported by gunicorn) -------------


def counting_application():
    """``project.wsgi.application``, counting the SQL statements of each POST agent/session.

    Each worker process keeps {statements per request: requests} and rewrites
    ``$BENCH_QUERY_DIR/<pid>.json`` at most every 0.5 s (and at exit).
    """
    import atexit

    from django.db import connection

    from project.wsgi import application

    out = Path(os.environ[QUERY_DIR_ENV]) / f"{os.getpid()}.json"
    histogram: Counter = Counter()
    lock = threading.Lock()
    last_flush = [0.0]

    def flush() -> None:
        with lock:
            data = json.dumps({str(k): v for k, v in histogram.items()})
        tmp = out.with_suffix(".tmp")
        tmp.write_text(data)
        tmp.replace(out)

    atexit.register(flush)

    def app(environ, start_response):
        if environ.get("PATH_INFO") != SESSION_PATH or environ.get("REQUEST_METHOD") != "POST":
            return application(environ, start_response)
        statements = [0]

        def count(execute, sql, params, many, context):
            statements[0] += 1
            return execute(sql, params, many, context)

        with connection.execute_wrapper(count):
            response = application(environ, start_response)
        now = time.monotonic()
        with lock:
            histogram[statements[0]] += 1
            due = now - last_flush[0] >= 0.5
            if due:
                last_flush[0] = now
        if due:
            flush()
        return response

    return app


def read_query_counts(directory: Path) -> Counter:
    total: Counter = Counter()
    for path in directory.glob("*.json"):
        try:
            total.update({int(k): v for k, v in json.loads(path.read_text()).items()})
        except (ValueError, OSError):
            continue  # being replaced right now: the next read has it
    return total


# --- the machine side: CPU and database counters ------------------------------------------------


def pg_snapshot(url: str, name: str) -> tuple[int, list[int]]:
    """(xact_commit of the database, pids of the server's backends connected to it)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        commits = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (name,)).fetchone()
        pids = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (name,)
        ).fetchall()
    return int(commits[0]), [int(pid) for (pid,) in pids]


def children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def cpu_ticks(pid: int) -> int | None:
    """utime + stime of a process in clock ticks (fields 14 and 15 of /proc/<pid>/stat), None when gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])


class CpuSampler:
    """CPU used during a window by a changing set of processes, sampled every ``every`` seconds.

    Database backends come and go (CONN_MAX_AGE recycles them), so the set is
    re-read at each sample: a process seen at the first sample counts from
    there, one born later counts from zero, one that exits counts up to its
    last sample (it loses at most ``every`` seconds of CPU).
    """

    def __init__(self, list_pids, every: float = 0.5):
        self._list_pids = list_pids
        self._every = every
        self._first: dict[int, int] = {}
        self._last: dict[int, int] = {}
        self._started = False

    def sample(self) -> None:
        for pid in self._list_pids():
            ticks = cpu_ticks(pid)
            if ticks is None:
                continue
            self._first.setdefault(pid, ticks if not self._started else 0)
            self._last[pid] = ticks
        self._started = True

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.to_thread(self.sample)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._every)

    def seconds(self) -> float:
        return sum(self._last[pid] - self._first[pid] for pid in self._last) / os.sysconf("SC_CLK_TCK")


class ProcessSampler(threading.Thread):
    """Peak resident memory and CPU seconds of process trees (a process and its children), every ``every`` s.

    ``postgres``: the database's backends (connections come and go) are sampled for CPU too;
    ``simulator``: this process (the harness) and the simulator's processes, ``simulator_pids()``.
    """

    def __init__(
        self,
        roots: dict[str, int],
        *,
        database_url: str,
        database: str,
        simulator_pids: Callable[[], list[int]],
        every: float = 1.0,
    ):
        super().__init__(daemon=True, name="process-sampler")
        self.roots = roots
        self.every = every
        self.peak_kib = dict.fromkeys(roots, 0)
        self.cpu = {name: CpuSampler(lambda pid=pid: self.tree(pid)) for name, pid in roots.items()}
        self.cpu["simulator"] = CpuSampler(lambda: [os.getpid(), *simulator_pids()])
        self.cpu["postgres"] = CpuSampler(lambda: pg_snapshot(database_url, database)[1])
        self._halt = threading.Event()

    @staticmethod
    def tree(pid: int) -> list[int]:
        pids, todo = [], [pid]
        while todo:
            one = todo.pop()
            pids.append(one)
            todo.extend(children(one))
        return pids

    @staticmethod
    def rss_kib(pid: int) -> int:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            pass  # gone meanwhile
        return 0

    def run(self) -> None:
        while not self._halt.is_set():
            for name, pid in self.roots.items():
                self.peak_kib[name] = max(self.peak_kib[name], sum(map(self.rss_kib, self.tree(pid))))
            for sampler in self.cpu.values():
                sampler.sample()
            self._halt.wait(self.every)

    def stop(self) -> None:
        """Stop sampling, with a last sample: CPU is counted up to now. A second call changes nothing."""
        if self._halt.is_set():
            return
        self._halt.set()
        if self.is_alive():  # a run that failed before its measurement began never started it
            self.join(timeout=10)
        for sampler in self.cpu.values():
            sampler.sample()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else float("nan")


def is_5xx(kind: str) -> bool:
    """A simulator error kind ``<call>_<status>`` (e.g. ``session_502``) naming a 5xx answer."""
    code = kind.rsplit("_", 1)[-1]
    return code.isdigit() and code.startswith("5")


def agent_errors(stats: Any) -> tuple[int, str]:
    """The 5xx answers a fleet's agents got, and their five commonest kinds of error (``kind n, ...``)."""
    server_errors = sum(n for kind, n in stats.errors_by_kind.items() if is_5xx(kind))
    return server_errors, ", ".join(f"{kind} {n}" for kind, n in stats.errors_by_kind.most_common(5)) or "-"
