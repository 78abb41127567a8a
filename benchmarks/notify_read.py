"""What reading a NOTIFY costs a web process (fleet/watch/hub.py): ``python -m benchmarks notify-read``.

Every web process reads every notification of the watch channel: every join, leave and spec change of the fleet,
a few per upgraded node. Here a separate process sends ``--notifications`` of them one at a time, a millisecond
apart (as a rollout's joins and leaves arrive), and this process reads them, on uvloop as gunicorn's uvicorn
workers do, three ways in alternating rounds:

- ``WatchHub``: the hub itself, listening as in the web tier (a reader kept on the connection's socket), every
  notification delivered (its node ids parsed, the node's held requests woken: none here);
- ``notifies()``: psycopg's async iterator, as the hub read them before (a reader, a future and a timer added and
  removed for every notification it waits for), the same delivery;
- the floor: a hand-written reader that only decodes each payload.

Printed: this process's CPU (every thread's) per notification, and its ratio to the floor's. Then the hub's delivery
alone, without a connection (its part of the hub's line): payloads as ``fleet_watch_notify`` sends them, a join's or
a leave's (one node) and a tick's (240 nodes, past 10,000 notified within 10 s), best of seven passes.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python -m benchmarks notify-read
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

QUICK_ARGV = ["--notifications", "1000", "--rounds", "2"]
CHANNEL = "bench_notify_read"
SENDER = """
import sys, time, uuid, psycopg
url, channel, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
with psycopg.connect(url, autocommit=True) as connection:
    time.sleep(0.3)
    for _ in range(count):
        connection.execute("SELECT pg_notify(%s, %s)", [channel, uuid.uuid4().hex])
        time.sleep(0.001)
"""


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Reading:
    """One variant's round: counts what it was given, and the CPU from the first notification to the last."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.seen = 0
        self.started: float | None = None
        self.cpu = 0.0
        self.done = asyncio.get_running_loop().create_future()

    def one(self) -> None:
        if self.started is None:
            self.started = cpu_seconds()
        self.seen += 1
        if self.seen == self.count and not self.done.done():
            self.cpu = cpu_seconds() - self.started
            self.done.set_result(None)


async def send(url: str, count: int) -> None:
    sender = await asyncio.create_subprocess_exec(sys.executable, "-c", SENDER, url, CHANNEL, str(count))
    await sender.wait()


async def via_hub(url: str, count: int) -> float:
    from psycopg.conninfo import conninfo_to_dict

    from fleet.watch.hub import WatchHub

    reading = Reading(count)
    hub = WatchHub(conninfo=conninfo_to_dict(url), channel=CHANNEL, reconnect_seconds=1, ping_seconds=30)
    deliver = hub._deliver

    def delivered(payload: str) -> None:
        deliver(payload)
        reading.one()

    hub._deliver = delivered  # type: ignore[method-assign]
    await hub.start(timeout=10)
    await asyncio.gather(send(url, count), reading.done)
    await hub.stop()
    return reading.cpu / count


async def via_notifies(url: str, count: int) -> float:
    import psycopg

    from fleet.watch.hub import WatchHub

    reading = Reading(count)
    hub = WatchHub(conninfo={}, channel=CHANNEL, reconnect_seconds=1)  # its delivery only
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        await connection.execute(f"LISTEN {CHANNEL}")

        async def read() -> None:
            while reading.seen < count:
                async for notify in connection.notifies(timeout=30):
                    hub._deliver(notify.payload)
                    reading.one()
                    if reading.seen == count:
                        break

        await asyncio.gather(send(url, count), read())
    return reading.cpu / count


async def via_floor(url: str, count: int) -> float:
    import psycopg

    reading = Reading(count)
    loop = asyncio.get_running_loop()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        await connection.execute(f"LISTEN {CHANNEL}")
        pgconn = connection.pgconn

        def readable() -> None:
            pgconn.consume_input()
            while (notify := pgconn.notifies()) is not None:
                notify.extra.decode()
                reading.one()

        loop.add_reader(pgconn.socket, readable)
        try:
            await asyncio.gather(send(url, count), reading.done)
        finally:
            loop.remove_reader(pgconn.socket)
    return reading.cpu / count


async def delivery_alone() -> dict[str, float]:
    """Seconds of the hub's delivery per payload, by payload (the module docstring's last part)."""
    import timeit
    import uuid

    from fleet.watch.hub import TRANSACTION_MARK, WatchHub

    hub = WatchHub(conninfo={}, channel=CHANNEL, reconnect_seconds=1)

    def payload(transaction: int, nodes: int) -> str:
        return ",".join([f"{TRANSACTION_MARK}{transaction:019x}", *(uuid.uuid4().hex for _ in range(nodes))])

    shapes = {"one node (a join, a leave)": [payload(n, 1) for n in range(5000)]}
    shapes["240 nodes (a tick's), past 10,000"] = [payload(n, 240) for n in range(60)]

    def best(payloads: list[str]) -> float:
        return min(timeit.repeat(lambda: [hub._deliver(p) for p in payloads], number=1, repeat=7)) / len(payloads)

    return {shape: best(payloads) for shape, payloads in shapes.items()}


VARIANTS: dict[str, Callable[[str, int], Awaitable[float]]] = {
    "WatchHub (a reader kept on the socket)": via_hub,
    "psycopg notifies() (the hub before)": via_notifies,
    "floor: a bare reader, decode only": via_floor,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks notify-read", description=__doc__.split("\n")[0])
    parser.add_argument("--notifications", type=int, default=3000, help="per round and variant")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")  # the hub logs each LISTEN
    import django
    import uvloop

    django.setup()
    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    url = url.rsplit("/", 1)[0] + "/postgres"  # any database: a channel needs no table
    results: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(options.rounds):
        for name, variant in VARIANTS.items():
            results[name].append(uvloop.run(variant(url, options.notifications)))
    floor = min(results["floor: a bare reader, decode only"])
    print(f"{options.notifications:,} notifications a millisecond apart, {options.rounds} rounds, uvloop")
    print(f"{'reader':42} {'CPU per notification (best)':>28} {'all rounds':>22} {'/ floor':>8}")
    for name, values in results.items():
        rounds = ", ".join(f"{1e6 * value:.0f}" for value in values)
        print(f"{name:42} {1e6 * min(values):>25.1f} µs {rounds:>22} {min(values) / floor:>7.2f}x")
    print("the hub's delivery alone, per payload (best of 7 passes):")
    for shape, seconds in uvloop.run(delivery_alone()).items():
        print(f"  {shape:40} {1e6 * seconds:>25.1f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
