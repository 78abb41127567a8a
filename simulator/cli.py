"""The command line, shared by ``python -m simulator`` and ``python manage.py simulate_agents``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import IO

from rollout.release.keys import parse_pin
from simulator.config import (
    DEFAULT_DAEMON_VERSION,
    DEFAULT_PROTOCOL_VERSION,
    FAIL_MODES,
    NEVER_REJOIN,
    SPEC_MIN_PROTOCOL_VERSION,
    AgentConfig,
    SimulatorError,
    build_agent_configs,
)
from simulator.enrolment import enroll, labels_for, parse_label_shares, read_tokens, write_tokens
from simulator.fleet import Fleet
from simulator.retry import BACKOFF, FIXED
from simulator.shards import ShardedFleet
from simulator.stats import FleetStats


def _share(value: str) -> float:
    share = float(value)
    if not 0 <= share <= 1:
        raise argparse.ArgumentTypeError("a share is a number in [0, 1]")
    return share


def _non_negative(value: str) -> float:
    number = float(value)
    if number < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return number


def _positive(value: str) -> float:
    number = float(value)
    if number <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return number


def _pin(value: str) -> str:
    try:
        parse_pin(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", default="http://127.0.0.1:8000", help="the server's base URL")
    parser.add_argument("--count", type=int, help="how many agents (with --enroll: how many nodes to create)")
    parser.add_argument(
        "--api-key",
        default=os.environ.get("ROLLOUT_API_KEY"),
        help="operator API key (compute:fleet:admin), only for --enroll (agents use their agent tokens); "
        "default $ROLLOUT_API_KEY",
    )
    parser.add_argument(
        "--release-pin",
        action="append",
        type=_pin,
        required=True,
        metavar="PIN",
        help="a release key the agents trust (repeatable): the server's ROLLOUT_RELEASE_PINS, root 1 of the "
        "key chain; agents run only releases these keys signed",
    )
    parser.add_argument(
        "--release-threshold", type=int, default=1, help="distinct pinned keys that must sign (default 1)"
    )
    parser.add_argument("--pools", default="default", help="comma-separated pool names to enroll into")
    parser.add_argument("--create-pools", action="store_true", help="create the --pools that do not exist")
    parser.add_argument("--tokens-file", help="agent tokens: read from it, or written to it with --enroll")
    parser.add_argument("--enroll", action="store_true", help="create --count nodes through the API first")
    parser.add_argument(
        "--labels",
        help="with --enroll: key=value:share,... gives that share of the nodes (seeded) each label, "
        "e.g. ring=canary:0.05,zone=a:0.5",
    )
    parser.add_argument("--name-prefix", help="node name prefix for --enroll (default sim-<random>-)")
    parser.add_argument("--arch", default="amd64", help="the agents' arch (node arch for --enroll)")
    parser.add_argument("--daemon-version", default=DEFAULT_DAEMON_VERSION, help="version the agents start on")
    parser.add_argument("--protocol-version", type=int, default=DEFAULT_PROTOCOL_VERSION)
    parser.add_argument(
        "--spec-min-protocol-version",
        type=int,
        default=SPEC_MIN_PROTOCOL_VERSION,
        help="agents below this protocol version ignore spec.daemon and upgrade on daemon.upgrade commands",
    )
    parser.add_argument(
        "--heartbeat-seconds", "--heartbeat", type=_positive, help="override the server's heartbeatSeconds"
    )
    parser.add_argument("--heartbeat-scale", type=_positive, default=1.0, help="multiply the server's interval")
    parser.add_argument("--jitter", type=float, default=0.1, help="+/- fraction of jitter on each interval")
    parser.add_argument("--restart-delay", type=_non_negative, default=1.0, help="seconds a restart takes")
    parser.add_argument("--restart-jitter", type=_non_negative, default=0.0, help="extra random restart seconds")
    parser.add_argument("--fail-share", type=_share, help="share of agents (seeded) that fail their upgrades")
    parser.add_argument("--fail-version", help="upgrades to this version fail (for --fail-share, or all agents)")
    parser.add_argument("--fail-mode", choices=FAIL_MODES, default=NEVER_REJOIN)
    parser.add_argument("--offline-share", type=_share, default=0.0, help="share of agents (seeded) that never join")
    parser.add_argument(
        "--flap-share", type=_share, default=0.0, help="share of agents (seeded) that flap after their first upgrade"
    )
    parser.add_argument(
        "--flap-after", type=_non_negative, default=2.0, help="seconds a flapping agent stays on the new version"
    )
    parser.add_argument("--flap-down", type=_non_negative, default=5.0, help="seconds a flapping agent stays away")
    parser.add_argument(
        "--down-share", type=_share, default=0.0, help="share of agents (seeded) that go offline and return later"
    )
    parser.add_argument(
        "--down-after", type=_non_negative, default=0.0, help="seconds after start they go offline (0: at once)"
    )
    parser.add_argument("--down-for", type=_non_negative, default=30.0, help="seconds they stay offline")
    parser.add_argument(
        "--confirmed-sequence",
        type=int,
        help="the release sequence the agents already confirmed (else learned from the verified release they run)",
    )
    parser.add_argument("--duration", type=_positive, help="stop after this many seconds (default: until a signal)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stats-every", type=_positive, default=5.0, help="seconds between status lines")
    parser.add_argument(
        "--max-connections", type=int, help="HTTP connection pool size and in-flight limit (default: 8 to 16)"
    )
    parser.add_argument("--leave-on-exit", action="store_true", help="agents leave their sessions when stopping")
    parser.add_argument(
        "--download-rate",
        type=_positive,
        metavar="BYTES_PER_S",
        help="each agent downloads at most this many bytes/s (default: as fast as the link)",
    )
    parser.add_argument(
        "--shared-downloads",
        action="store_true",
        help="one download per binary for the whole fleet instead of one per agent (control-plane benchmarks)",
    )
    parser.add_argument(
        "--watch",
        action="store_true",
        help="hold session requests (wait = the heartbeat interval, at most 60 s): a new spec arrives at once",
    )
    parser.add_argument(
        "--fixed-retry",
        action="store_true",
        help="retry as the simulator did before the agent protocol's rule: a failed beat waits its whole interval, "
        "Retry-After without jitter (default: backoff with full jitter, docs/fleet.md#retries)",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="split the agents over this many child processes, one event loop each (about 300-400 "
        "heartbeats/s per process; default 1: this process)",
    )


async def run_cli(options: argparse.Namespace, out: IO[str] | io.TextIOBase | None = None) -> int:
    """Enroll (optionally) and run the agents as the command line asks; returns the exit status."""
    out = out or sys.stdout

    def say(line: str) -> None:
        out.write(line + "\n")
        with contextlib.suppress(AttributeError, ValueError):
            out.flush()

    pools = [name.strip() for name in (options.pools or "").split(",") if name.strip()]
    if options.labels and not options.enroll:
        raise SimulatorError("--labels needs --enroll (labels are set when the nodes are created)")
    if options.enroll:
        if not options.api_key:
            raise SimulatorError("--enroll needs --api-key")
        if not options.count:
            raise SimulatorError("--enroll needs --count")
        shares = parse_label_shares(options.labels) if options.labels else []
        nodes = await enroll(
            options.server,
            options.api_key,
            options.count,
            pools=pools,
            create_pools=options.create_pools,
            name_prefix=options.name_prefix,
            arch=options.arch,
            labels=labels_for(options.count, shares, seed=options.seed) if shares else None,
        )
        if options.tokens_file:
            write_tokens(options.tokens_file, nodes)
            say(f"enrolled {len(nodes)} nodes into {', '.join(pools)}; tokens written to {options.tokens_file}")
        else:
            say(f"enrolled {len(nodes)} nodes into {', '.join(pools)} (no --tokens-file: tokens not kept)")
        tokens = [(node.name, node.token) for node in nodes]
    elif options.tokens_file:
        tokens = read_tokens(options.tokens_file)
        if options.count:
            if options.count > len(tokens):
                raise SimulatorError(f"--count {options.count} but {options.tokens_file} has {len(tokens)} tokens")
            tokens = tokens[: options.count]
    else:
        raise SimulatorError("give --tokens-file (existing agent tokens) or --enroll --api-key KEY --count N")

    configs = build_agent_configs(
        tokens,
        daemon_version=options.daemon_version,
        protocol_version=options.protocol_version,
        arch=options.arch,
        confirmed_sequence=options.confirmed_sequence,
        fail_share=options.fail_share,
        fail_version=options.fail_version,
        fail_mode=options.fail_mode,
        offline_share=options.offline_share,
        flap_share=options.flap_share,
        flap_after=options.flap_after,
        flap_down=options.flap_down,
        down_share=options.down_share,
        down_after=options.down_after,
        down_for=options.down_for,
        seed=options.seed,
    )
    if options.processes < 1:
        raise SimulatorError("--processes must be at least 1")
    if not 1 <= options.release_threshold <= len(set(options.release_pin)):
        raise SimulatorError("--release-threshold must be from 1 to the number of distinct --release-pin")
    fleet_options = {
        "release_pins": options.release_pin,
        "release_threshold": options.release_threshold,
        "heartbeat_seconds": options.heartbeat_seconds,
        "heartbeat_scale": options.heartbeat_scale,
        "jitter": options.jitter,
        "restart_delay": options.restart_delay,
        "restart_jitter": options.restart_jitter,
        "seed": options.seed,
        "max_connections": options.max_connections,
        "spec_min_protocol_version": options.spec_min_protocol_version,
        "leave_on_stop": options.leave_on_exit,
        "download_rate": options.download_rate,
        "shared_downloads": options.shared_downloads,
        "watch": options.watch,
        "retry": FIXED if options.fixed_retry else BACKOFF,
    }
    failing = sum(1 for config in configs if config.fail_mode)
    offline = sum(1 for config in configs if config.offline)
    failure = f"{failing} fail their upgrades ({options.fail_mode}"
    failure += f" on {options.fail_version})" if options.fail_version else ")"
    flapping = sum(1 for config in configs if config.flap_after is not None)
    going_down = sum(1 for config in configs if config.down_after is not None)
    say(
        f"simulating {len(configs)} agents against {options.server}: {offline} offline, {failure},"
        f" {flapping} flap after upgrade, {going_down} go offline and return"
        + (f" ({options.processes} processes)" if options.processes > 1 else "")
    )
    if options.processes > 1:
        stats = await _run_sharded(options, configs, fleet_options, say)
    else:
        stats = await _run_here(options, configs, fleet_options, say)
    say(
        f"done: {stats.heartbeats} heartbeats, {stats.joins} joins, {stats.upgrades} upgrades,"
        f" {stats.failed_upgrades} failed upgrades, {stats.refusals} refusals,"
        f" {stats.downloads} downloads ({stats.download_cache_hits} from cache; {stats.download_bytes:,} bytes in"
        f" {stats.download_seconds:.1f} agent-seconds, {stats.download_resumes} resumes),"
        f" {stats.throttled} throttled (429s waited out), {stats.overloaded} overloaded (503s waited out),"
        f" {stats.errors} errors"
    )
    return 0


async def _run_sharded(
    options: argparse.Namespace, configs: list[AgentConfig], fleet_options: dict, say: Callable[[str], None]
) -> FleetStats:
    """The agents in ``--processes`` children until ``--duration`` passes or a signal comes."""
    fleet = ShardedFleet(options.server, configs, processes=options.processes, **fleet_options)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, stop.set)
    fleet.start(timeout=options.duration)
    try:
        while not stop.is_set() and not fleet.finished():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), options.stats_every)
            say(fleet.status_line())
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(signum)
        await asyncio.to_thread(fleet.stop)
    return fleet.stats


async def _run_here(
    options: argparse.Namespace, configs: list[AgentConfig], fleet_options: dict, say: Callable[[str], None]
) -> FleetStats:
    """The agents on this event loop until ``--duration`` passes or a signal comes."""
    fleet = Fleet(options.server, configs, **fleet_options)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, fleet.stop)

    async def report() -> None:
        while await fleet.sleep(options.stats_every):
            say(fleet.status_line())

    try:
        running = asyncio.create_task(fleet.run(timeout=options.duration))
        while not fleet.stopper.started and not running.done():  # let run() set up before report() starts
            await asyncio.sleep(0)
        reporter = asyncio.create_task(report())
        await running
        await reporter
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(signum)
    say(fleet.status_line())
    return fleet.stats


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulator", description=__doc__.split("\n")[0])
    add_arguments(parser)
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return asyncio.run(run_cli(options))
    except SimulatorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
