"""``python -m benchmarks [engine|heartbeats|all ...] [--quick] [-- extra args]``: run benchmarks, print tables.

``make bench`` runs this with DATABASE_URL pointing at PostgreSQL; ``make bench
ARGS="engine --quick"`` passes arguments. Exits non-zero when a benchmark fails.
``all`` (the default) runs every benchmark, ``fleet10k`` (about 11 minutes) last.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/rollout"

# name -> (module, description, argv for --quick). A module may define QUICK_ARGV to override the
# last. A benchmark is available when its module exists and has a callable ``main(argv) -> int``.
BENCHMARKS: dict[str, tuple[str, str, list[str]]] = {
    "engine": ("benchmarks.engine", "rollout_create and rollout_tick at 1k-100k nodes, in-process", ["--quick"]),
    "supersede": (
        "benchmarks.supersede",
        "a create superseding a 100,000-node rollout against a plain create over the same nodes",
        ["--quick"],
    ),
    "heartbeats": (
        "benchmarks.heartbeats",
        "1,000 simulated agents heartbeating against gunicorn",
        ["--duration", "10", "--warmup", "30"],
    ),
    "efficiency": ("benchmarks.efficiency", "rollout efficiency with 1,000 simulated agents", ["--quick"]),
    "heartbeat-floor": (
        "benchmarks.heartbeat_floor",
        "plain heartbeats: the agent endpoint against a hand-written SELECT + UPDATE view (ratio)",
        [],  # the module's QUICK_ARGV
    ),
    "request-limits": (
        "benchmarks.request_limits",
        "what counting a request against its credential (429 limits) costs the web process, per request",
        [],  # the module's QUICK_ARGV
    ),
    "delivery": (
        "benchmarks.delivery",
        "the make web tier: 1,000 agents heartbeating while 50 download 32 MiB at 1 MiB/s; offload accel vs none",
        [],  # the module's QUICK_ARGV
    ),
    "watch": (
        "benchmarks.watch",
        "10,000 held agent sessions on the make web tier: its RSS, wake latency, plain heartbeats beside them",
        [],  # the module's QUICK_ARGV
    ),
    "notify-read": (
        "benchmarks.notify_read",
        "what reading a NOTIFY costs a web process: the watch hub's reader against psycopg's notifies() and a floor",
        [],  # the module's QUICK_ARGV
    ),
    "gates": (
        "benchmarks.gates",
        "1,000 active rollouts x 2 gates evaluated every 30 s: a worker's CPU per evaluation and share of one process",
        [],  # the module's QUICK_ARGV
    ),
    "reconnect": (
        "benchmarks.reconnect",
        "10,000 watching agents rejoining after a 10 s restart of gunicorn: admission and backoff vs neither",
        [],  # the module's QUICK_ARGV
    ),
    "labels": (
        "benchmarks.labels",
        "a create with a selector (10 % of 100,000 nodes) vs pools; bulk labelling vs the raw UPDATE",
        ["--quick"],
    ),
    "fleet10k": (
        "benchmarks.fleet10k",
        "a whole rollout over 10,000 simulated agents: efficiency, hb/s, p99, 5xx, worker RSS (~11 min)",
        [],  # the module's QUICK_ARGV
    ),
}


def load_module(name: str) -> Any:
    """The benchmark's module, or None when it does not exist (yet)."""
    module_name = BENCHMARKS[name][0]
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            return None
        raise


def entry_point(name: str) -> Callable[[list[str]], int] | None:
    """The benchmark's ``main(argv)``, or None when its module is missing or has none."""
    main = getattr(load_module(name), "main", None)
    return main if callable(main) else None


def quick_argv(name: str) -> list[str]:
    return list(getattr(load_module(name), "QUICK_ARGV", BENCHMARKS[name][2]))


def load_average() -> str:
    """The 1/5/15-minute load averages: other work on the machine skews every number."""
    try:
        return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "load average unknown"


def machine_header() -> str:
    url = os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=10) as conn:
            pg = conn.execute("SELECT version()").fetchone()[0].split(" on ")[0]
            settings = dict(
                conn.execute(
                    "SELECT name, setting || coalesce(unit, '') FROM pg_settings "
                    "WHERE name IN ('shared_buffers', 'synchronous_commit', 'max_wal_size', 'work_mem')"
                ).fetchall()
            )
        pg += " (" + ", ".join(f"{k}={v}" for k, v in sorted(settings.items())) + ")"
    except Exception as exc:  # the header must not hide the benchmark's own error
        pg = f"unavailable ({exc.__class__.__name__}: {exc})"
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        memory = f"{pages * page_size / 2**30:.0f} GiB"
    except (ValueError, OSError):
        memory = "?"
    import django

    return "\n".join(
        [
            f"machine:    {platform.node()}, {os.cpu_count()} cores, {memory} RAM, {platform.platform()}",
            f"python:     {platform.python_version()}, Django {django.get_version()}",
            f"postgresql: {pg}",
            f"started:    {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, {load_average()}",
        ]
    )


def run_in_process(name: str, argv: list[str]) -> int:
    """Run one benchmark's ``main(argv)`` here; its exit code (1 on an exception)."""
    try:
        code = entry_point(name)(argv)
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception:  # report it; the caller goes on with the next benchmark
        traceback.print_exc()
        code = 1
    return code or 0


def run_isolated(name: str, argv: list[str]) -> int:
    """Run one benchmark in a fresh interpreter.

    Some benchmarks set Django up in-process on their own database and change
    os.environ; a process each keeps one from running on another's settings.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    code = "import sys; from benchmarks.__main__ import run_in_process as run; sys.exit(run(sys.argv[1], sys.argv[2:]))"
    return subprocess.run([sys.executable, "-c", code, name, *argv], cwd=ROOT, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Run benchmarks and print their tables. Arguments after `--` go to every chosen benchmark.",
    )
    parser.add_argument(
        "names",
        nargs="*",
        metavar="name",
        help=f"{', '.join(BENCHMARKS)} or all (default: all available)",
    )
    parser.add_argument("--quick", action="store_true", help="a smaller, shorter run of each benchmark")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    options = parser.parse_args(argv)

    available = {name: entry_point(name) for name in BENCHMARKS}
    if options.list:
        for name, (_, description, _) in BENCHMARKS.items():
            state = "" if available[name] else "  (not available: no main())"
            print(f"{name:<12} {description}{state}")
        return 0
    names = options.names or ["all"]
    unknown = [n for n in names if n != "all" and n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)} or all")
    chosen: list[str] = []
    for name in names:
        for one in [n for n in BENCHMARKS if available[n]] if name == "all" else [name]:
            if one not in chosen:
                chosen.append(one)
    missing = [n for n in chosen if available[n] is None]
    if missing:
        print(f"benchmark(s) not available (no main()): {', '.join(missing)}", file=sys.stderr)
        return 2

    print(machine_header())
    failed = []
    for name in chosen:
        run_argv = (quick_argv(name) if options.quick else []) + extra
        print(f"\n=== {name} {' '.join(run_argv)}".rstrip(), flush=True)
        start = time.perf_counter()
        code = run_isolated(name, run_argv)
        status = "ok" if code == 0 else f"FAILED (exit {code})"
        print(f"=== {name}: {status} in {time.perf_counter() - start:.0f} s; {load_average()}", flush=True)
        if code:
            failed.append(name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
