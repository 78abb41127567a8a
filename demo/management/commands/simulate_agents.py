"""``python manage.py simulate_agents``: N simulated bcd agents against a server, over real HTTP.

A thin wrapper over ``simulator`` (which needs no Django and is
also ``python -m simulator``). See docs/simulator.md.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandError

import simulator


class Command(BaseCommand):
    help = (
        "Run N simulated bcd node agents (join, heartbeat, upgrade on spec.daemon or daemon.upgrade) "
        "against the agent API of a running server; optionally enroll their nodes first."
    )
    # A pure HTTP client of some server: it neither needs nor checks this process's database.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        simulator.add_arguments(parser)

    def handle(self, *args: object, **options: Any) -> None:
        if int(options.get("verbosity", 1)) < 2:
            # One log line per request from a thousand agents drowns the status lines.
            for name in ("httpx", "httpcore"):
                logging.getLogger(name).setLevel(logging.WARNING)
        try:
            asyncio.run(simulator.run_cli(argparse.Namespace(**options), out=self.stdout))
        except simulator.SimulatorError as exc:
            raise CommandError(str(exc)) from exc
