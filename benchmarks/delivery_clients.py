"""Slow download clients in a process of their own: ``python -m benchmarks.delivery_clients URL SHA256 COUNT RATE``.

Used by the delivery benchmark (benchmarks/delivery.py) and the load rule's test (tests/delivery).

Each client is a simulated agent's download (simulator/downloads.py: its own connection, a receive
window of a tenth of a second at RATE bytes/s, paced at RATE). A download that fails (a 5xx, a
timeout) is retried 5 s later from where it stopped, as at an agent's next beat, for up to 10
minutes. Prints one JSON line once the clients have received 64 KiB each on average
(``{"started": n}``: they are downloading), then one with the outcome of each
(``{"done": [[sha256, size], ...], "seconds": s, "errors": n, "resumes": n}``). A process of its
own: the clients' reading and hashing never share an interpreter lock with the heartbeats measured.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import httpx

from simulator.downloads import AgentDownloads, downloads_client
from simulator.stats import FleetStats


async def main(url: str, sha256: str, count: int, rate: float, retry_after: float = 5.0) -> None:
    stats = FleetStats()
    started = time.monotonic()
    failures = 0

    async def client(downloads: AgentDownloads, index: int) -> list:
        """One agent's download; an error (a 5xx, a timeout) is retried after ``retry_after`` s, as at an
        agent's next beat, from where it stopped; given up after 10 minutes."""
        nonlocal failures
        while True:
            try:
                fetched = await downloads.fetch(url, sha256, holder=index)
                return [fetched.sha256, fetched.size]
            except httpx.HTTPError:
                failures += 1
                if time.monotonic() - started > 600:
                    return [None, 0]
                await asyncio.sleep(retry_after)

    async with downloads_client(rate) as http:
        downloads = AgentDownloads(http, stats, rate=rate, timeout=60)
        tasks = [asyncio.create_task(client(downloads, index)) for index in range(count)]
        while stats.download_bytes < count * 64 << 10 and not all(task.done() for task in tasks):
            await asyncio.sleep(0.05)
        print(json.dumps({"started": count}), flush=True)
        done = await asyncio.gather(*tasks)
    print(
        json.dumps(
            {"done": done, "seconds": time.monotonic() - started, "errors": failures, "resumes": stats.download_resumes}
        )
    )


if __name__ == "__main__":
    url, sha256, count, rate = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    asyncio.run(main(url, sha256, count, rate))
