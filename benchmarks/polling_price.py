"""What polling would cost the web tier, priced beside a fleet that watches (benchmarks/efficiency.py): its CPU
per plain heartbeat under the load that fleet would offer if it polled every 10 s."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from benchmarks.heartbeat_floor import REAL_PATH, request_bytes
from benchmarks.heartbeat_probes import CpuSampler, ProcessSampler, agent_errors
from benchmarks.speed_probe import SpeedProbe


@dataclass(frozen=True)
class LoopRound:
    """One round of a paced loop: the web tier's CPU over its ``seconds``, and the answers."""

    cpu: float
    answered: int
    seconds: float
    #: ``time.monotonic()`` at the round's start and end.
    window: tuple[float, float] = (math.nan, math.nan)


@dataclass(frozen=True)
class LoopPrice:
    """What a paced loop of requests cost the web tier, in rounds."""

    rounds: tuple[LoopRound, ...]
    #: When the loop ran: ``time.monotonic()`` at its start and end (benchmarks/speed_probe.py compares windows).
    window: tuple[float, float] = (math.nan, math.nan)

    def per_request(self, background: float = 0.0) -> float:
        """Web-tier CPU seconds per answered request in the cheapest round, with ``background`` CPU seconds a second
        (the idle fleet's, which runs beside the loop) taken out, as the upgrade's price takes the idle fleet's out
        of the rollout's. The cheapest: whatever else the tier did meanwhile (a fleet still settling after its
        joins) only adds to a round's CPU, and one round's price moved by half between runs of the same build."""
        return min(self.each(background))

    def each(self, background: float = 0.0) -> list[float]:
        """Every round's price, as ``per_request`` takes the cheapest."""
        return [max(0.0, r.cpu - background * r.seconds) / max(1, r.answered) for r in self.rounds]

    def at_speed(self, scale: Callable[[tuple[float, float]], float]) -> LoopPrice:
        """The same rounds with each one's CPU at one machine speed (``SpeedProbe.scale``)."""
        return replace(self, rounds=tuple(replace(r, cpu=r.cpu * scale(r.window)) for r in self.rounds))


@dataclass(frozen=True)
class IdleWindow:
    """A measured window of the idle fleet: the web tier's CPU in it, nginx's, and the requests answered."""

    cpu: float
    nginx_cpu: float
    requests: int
    #: ``time.monotonic()`` at its start and end.
    window: tuple[float, float]

    @property
    def seconds(self) -> float:
        return self.window[1] - self.window[0]


def idle_window(*, web_pid: int, nginx_pid: int | None, sent: Callable[[], int], seconds: float) -> IdleWindow:
    """Measure ``seconds`` of the idle fleet; ``sent``: the requests its agents had answered so far."""
    web = CpuSampler(lambda: ProcessSampler.tree(web_pid))
    nginx = CpuSampler(lambda: ProcessSampler.tree(nginx_pid) if nginx_pid else [])
    web.sample()
    nginx.sample()
    requests, started = -sent(), time.monotonic()
    time.sleep(seconds)
    web.sample()
    nginx.sample()
    return IdleWindow(web.seconds(), nginx.seconds(), requests + sent(), (started, time.monotonic()))


def web_cpu_per_heartbeat(
    web_pid: int, port: int, tokens: list[tuple[str, str]], seconds: float = 4.0, *, bursts: bool = False
) -> LoopPrice:
    """The web tier's CPU for plain heartbeats when the agents poll every 10 s: ``len(tokens) / 10`` requests a
    second, paced over 16 connections for ``seconds`` (their sessions are open on 1.0.0: every request is a
    plain heartbeat). A server that cannot keep up serves as many as it can (then it is a closed loop).
    ``bursts``: the 16 connections send together (as this loop did before 2026-12-06), not evenly spaced. In
    rounds: ``web_cpu_per_request``."""
    requests = [request_bytes(REAL_PATH, token, port) for _, token in tokens]
    return web_cpu_per_request(web_pid, port, requests, rate=len(tokens) / 10, seconds=seconds, bursts=bursts)


def web_cpu_per_download(web_pid: int, port: int, path: str, *, rate: float, seconds: float = 4.0) -> LoopPrice:
    """The web tier's CPU for downloads of ``path`` (a binary), paced as ``web_cpu_per_heartbeat`` paces its
    heartbeats: what a download costs the tier beside a heartbeat, priced the same way in the same run."""
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: bcd-sim\r\n\r\n".encode()
    return web_cpu_per_request(web_pid, port, [request], rate=rate, seconds=seconds)


def web_cpu_per_request(
    web_pid: int,
    port: int,
    requests: list[bytes],
    *,
    rate: float,
    seconds: float,
    bursts: bool = False,
    rounds: int = 3,
) -> LoopPrice:
    """The web tier's CPU for ``requests`` in turn, ``rate`` a second over 16 keep-alive connections for
    ``seconds`` in each of ``rounds``, each answer read whole (its Content-Length). The connections take turns, one
    request every ``1 / rate`` seconds, as a fleet's requests arrive; ``bursts``: the 16 send at once every
    ``16 / rate``, which lets the server read several per wake-up and prices a request below what an agent's costs."""
    connections = 16
    answered, base = [0], [0]

    async def paced(first: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        loop, index = asyncio.get_running_loop(), first + base[0]  # each round goes on where the last one stopped
        start = loop.time()
        due = start if bursts else start + first / rate
        await asyncio.sleep(max(0.0, due - loop.time()))
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

    measured, began = [], time.monotonic()
    for _ in range(rounds):
        cpu = CpuSampler(lambda: ProcessSampler.tree(web_pid))
        cpu.sample()
        started, answered[0] = time.monotonic(), 0
        asyncio.run(load())
        cpu.sample()
        ended = time.monotonic()
        measured.append(
            LoopRound(cpu=cpu.seconds(), answered=answered[0], seconds=ended - started, window=(started, ended))
        )
        base[0] += answered[0] + connections
    return LoopPrice(rounds=tuple(measured), window=(began, time.monotonic()))


def requests_sent(stats: Any) -> int:
    """The requests a fleet's agents had answered (each try), their binaries' downloads included."""
    return sum(stats.answers.values()) + stats.downloads


PRICED = "  priced as plain heartbeats"
IDLE_AT_SPEED = "  the idle fleet and polling at the loop's machine speed"
TARGET = " (target <= 1.5)"


def upgrade_price(
    *,
    rollout_cpu: float,
    window: float,
    idle_cpu: float,
    idle_seconds: float,
    rollout_requests: int,
    idle_requests: int,
    upgraded: int,
    per_heartbeat: float,
) -> dict[str, str]:
    """What an upgrade costs the web tier against what its requests would cost as plain heartbeats (the target:
    at most 1.5 times). The idle fleet's CPU and requests, at their rate over the idle window, are taken out of
    the rollout's: what is left is the upgrades' own (the wake's answer, the download, the leave, the join and the
    arrival after it)."""
    cpu = (rollout_cpu - idle_cpu / idle_seconds * window) / upgraded
    requests = (rollout_requests - idle_requests / idle_seconds * window) / upgraded
    priced = per_heartbeat * requests
    return {
        "web CPU per upgraded node (idle share out)": f"{1000 * cpu:.2f} ms",
        "requests per upgrade (idle share out)": f"{requests:.2f}",
        PRICED: f"{1000 * priced:.2f} ms ({1000 * per_heartbeat:.2f} ms each); ratio {cpu / priced:.2f}{TARGET}",
    }


def upgrade_rows(
    measured: dict[str, Any],
    *,
    rollout_window: tuple[float, float],
    idle: Sequence[IdleWindow],
    probe: SpeedProbe,
    heartbeat: LoopPrice,
    bursts: LoopPrice,
    download: LoopPrice,
) -> dict[str, str]:
    """``upgrade_price`` for the rollout ``measured`` (its arguments but the heartbeat's price; the idle fleet's,
    those of the ``idle`` windows together) twice: by the CPU clock alone, and with every CPU figure at one machine
    speed, the heartbeat loop's (``probe``'s scale of the window each was measured in: the rollout's, each idle
    window's, each round of the loop's), on which the target is judged (docs/benchmarks.md says why). The loops'
    background is the first idle window's rate, the one measured right after them. Beside them: the probe's cost
    in each window, the download's price, every round's, and the heartbeat's as priced before 2026-12-06 (the idle
    fleet's CPU left in; the 16 connections sending at once)."""
    idle_rate = idle[0].cpu / idle[0].seconds
    per_heartbeat, per_download = heartbeat.per_request(idle_rate), download.per_request(idle_rate)
    in_bursts = upgrade_price(**measured, per_heartbeat=bursts.per_request(idle_rate))
    by_clock = upgrade_price(**measured, per_heartbeat=per_heartbeat)
    scale = probe.scale(heartbeat.window)
    steady = measured | {
        "rollout_cpu": measured["rollout_cpu"] * scale(rollout_window),
        "idle_cpu": sum(part.cpu * scale(part.window) for part in idle),
    }
    at_speed = upgrade_price(**steady, per_heartbeat=heartbeat_at_speed(heartbeat, idle[0], scale))
    each = ", ".join(f"{1000 * price:.2f}" for price in heartbeat.each(idle_rate))
    costs = [
        ", ".join(f"{1000 * probe.cost(window):.2f}" for window in windows)
        for windows in ([r.window for r in heartbeat.rounds], [part.window for part in idle], [rollout_window])
    ]
    return {
        **{name: value for name, value in by_clock.items() if not name.startswith("  ")},
        "  priced as plain heartbeats, by the CPU clock": by_clock[PRICED].removesuffix(TARGET),
        "  both at the loop's machine speed (benchmarks/speed_probe.py)": (
            f"{at_speed['web CPU per upgraded node (idle share out)']} against {at_speed[PRICED]}"
        ),
        "  the probe's CPU per unit of work: loop rounds / idle before, after / rollout": " / ".join(costs) + " ms",
        "  a download, priced as the heartbeat": (
            f"{1000 * per_download:.2f} ms ({per_download / per_heartbeat:.1f} heartbeats)"
        ),
        "  a plain heartbeat in each round (the cheapest priced)": f"{each} ms",
        "  a plain heartbeat with the idle fleet's CPU left in (before 2026-12-06)": (
            f"{1000 * heartbeat.per_request():.2f} ms"
        ),
        "  priced with heartbeats sent 16 at once (before 2026-12-06)": in_bursts[PRICED].removesuffix(TARGET),
    }


def heartbeat_at_speed(heartbeat: LoopPrice, idle: IdleWindow, scale: Callable[[tuple[float, float]], float]) -> float:
    """A plain heartbeat's price at one machine speed (``scale``): each round's CPU scaled, and the background
    taken out at ``idle``'s rate scaled the same way."""
    return heartbeat.at_speed(scale).per_request(idle.cpu * scale(idle.window) / idle.seconds)


def idle_at_speed(*, agents: int, idle: IdleWindow, heartbeat: LoopPrice, probe: SpeedProbe) -> str:
    """The idle fleet's web CPU against polling's (a plain heartbeat per agent every 10 s) with both at the
    heartbeat loop's machine speed, as ``upgrade_rows`` judges the upgrade's."""
    scale = probe.scale(heartbeat.window)
    idle_rate, per_heartbeat = idle.cpu * scale(idle.window) / idle.seconds, heartbeat_at_speed(heartbeat, idle, scale)
    ratio = idle_rate / (per_heartbeat * agents / 10)
    return f"ratio {ratio:.2f} (target <= 0.3; {1000 * per_heartbeat:.2f} ms a heartbeat)"


def idle_rows(
    *,
    agents: int,
    idle_seconds: float,
    idle_cpu: float,
    per_heartbeat: float,
    fleet: Any,
    sampler: ProcessSampler | None,
    heartbeat: float,
    at_speed: str | None,
) -> dict[str, Any]:
    """The rows of an idle fleet's measurement (``run`` without a rollout)."""
    idle = idle_cpu / (agents * idle_seconds / 60 / 1000)
    polling = per_heartbeat * 6 * 1000
    stats = fleet.stats
    server_errors, kinds = agent_errors(stats)
    result: dict[str, Any] = {
        "agents": f"{agents:,} (online {fleet.online_count():,})",
        "heartbeat": f"{heartbeat:g} s",
        f"web CPU s per 1,000 agent-minutes, idle ({idle_seconds:g} s)": (
            f"{idle:.2f} (polling every 10 s: {polling:.2f}, {1000 * per_heartbeat:.2f} ms a heartbeat; "
            f"ratio {idle / polling:.2f})"
            if polling
            else f"{idle:.2f}"
        ),
        **({IDLE_AT_SPEED: at_speed} if at_speed else {}),
        "web cores, idle": f"{idle_cpu / idle_seconds:.2f}",
        "5xx answers": str(server_errors),
        "agent errors": f"{stats.errors} ({kinds})",
    }
    if sampler:
        sampler.stop()
        result["peak RSS, gunicorn (all)"] = f"{sampler.peak_kib['web'] / 1024:.0f} MiB"
        result["CPU while idle (cores)"] = ", ".join(
            f"{name} {cpu.seconds() / idle_seconds:.2f}" for name, cpu in sampler.cpu.items()
        )
    result["_failed"] = bool(server_errors or stats.errors)
    return result
