"""Slow download clients in a process of their own: ``python -m benchmarks.delivery_clients URL SHA256 COUNT RATE``.

Used by the delivery benchmark (benchmarks/delivery.py) and the load rule's test (tests/delivery).

Each client is a simulated agent's download (simulator/downloads.py: its own connection, a receive
window of a tenth of a second at RATE bytes/s, paced at RATE). Prints one JSON line once the clients
have received 64 KiB each on average (``{"started": n}``: all are downloading), then one with the outcome of each
(``{"done": [[sha256, size], ...], "seconds": s}``). A process of its own: the clients' reading and
hashing never share an interpreter lock with the heartbeats being measured.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from simulator.downloads import AgentDownloads, downloads_client
from simulator.stats import FleetStats


async def main(url: str, sha256: str, count: int, rate: float) -> None:
    stats = FleetStats()
    started = time.monotonic()
    async with downloads_client(rate) as client:
        downloads = AgentDownloads(client, stats, rate=rate, timeout=60)
        tasks = [asyncio.create_task(downloads.fetch(url, sha256, holder=index)) for index in range(count)]
        while stats.download_bytes < count * 64 << 10 and not all(task.done() for task in tasks):
            await asyncio.sleep(0.05)
        print(json.dumps({"started": count}), flush=True)
        done = await asyncio.gather(*tasks)
    print(json.dumps({"done": [[one.sha256, one.size] for one in done], "seconds": time.monotonic() - started}))


if __name__ == "__main__":
    url, sha256, count, rate = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    asyncio.run(main(url, sha256, count, rate))
