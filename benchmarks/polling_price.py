"""What polling would cost the web tier, priced beside a fleet that watches (benchmarks/efficiency.py): its CPU
per plain heartbeat under the load that fleet would offer if it polled every 10 s."""

from __future__ import annotations

import asyncio

from benchmarks.heartbeat_floor import REAL_PATH, request_bytes
from benchmarks.heartbeat_probes import CpuSampler, ProcessSampler


def web_cpu_per_heartbeat(web_pid: int, port: int, tokens: list[tuple[str, str]], seconds: float = 10.0) -> float:
    """Web-tier CPU seconds per plain heartbeat when the agents poll every 10 s: ``len(tokens) / 10`` requests a
    second, paced over 16 connections for ``seconds`` (their sessions are open on 1.0.0: every request is a
    plain heartbeat). A server that cannot keep up serves as many as it can (then it is a closed loop)."""
    connections, rate = 16, len(tokens) / 10
    requests = [request_bytes(REAL_PATH, token, port) for _, token in tokens]
    answered = [0]

    async def paced(first: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        loop, index = asyncio.get_running_loop(), first
        due = start = loop.time()
        while loop.time() - start < seconds:
            writer.write(requests[index % len(requests)])
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line[15:]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-l"))
            await reader.readexactly(length)
            answered[0] += 1
            index += connections
            due += connections / rate
            await asyncio.sleep(max(0.0, due - loop.time()))
        writer.close()

    async def load() -> None:
        await asyncio.gather(*(paced(first) for first in range(connections)))

    cpu = CpuSampler(lambda: ProcessSampler.tree(web_pid))
    cpu.sample()
    asyncio.run(load())
    cpu.sample()
    return cpu.seconds() / max(1, answered[0])
