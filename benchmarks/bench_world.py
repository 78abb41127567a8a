"""The world a whole-system benchmark runs in (benchmarks/efficiency.py ``run``, hence fleet10k): a database of its
own, recreated; the configuration production reads (environment variables, set in this process too, and Django
set up on it); a tenant; releases 1.0.0 and 1.1.0, signed with a throwaway key the agents pin, their binaries
stored; the pools, and one node per agent with its token (no session until the agent joins)."""

from __future__ import annotations

import io
import math
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.bench_tier import nginx_env
from benchmarks.database import DEFAULT_DATABASE_URL, database_urls, recreate_database
from demo.processes import free_port

BASE_DIR = Path(__file__).resolve().parent.parent


@dataclass
class BenchWorld:
    env: dict[str, str]  # what the web tier, the worker and beat are started with
    database_url: str
    port: int  # the web tier's
    listen: list[str]  # the loopback addresses it listens on
    run_dir: Path
    tenant: Any
    pools: list[Any]
    tokens: list[tuple[str, str]]  # (node name, agent token) per agent


def metrics_dir(run_dir: Path) -> Path:
    """The processes' metric files, emptied: samples of an earlier run's processes would be summed in."""
    path = run_dir / "prometheus"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def arrivals_by_read(port: int) -> dict[str, float]:
    """The web tier's held arrivals so far by how they were read (``fleet_watch_arrivals_total``, fleet/watch), and
    under ``notifications`` the watch notifications its processes read (``fleet_watch_notifications_total``)."""
    import httpx

    counts: dict[str, float] = {}
    for line in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text.splitlines():
        if line.startswith("fleet_watch_arrivals_total{"):
            labels, value = line.rsplit(" ", 1)
            counts[labels.split('read="', 1)[1].split('"', 1)[0]] = float(value)
        elif line.startswith("fleet_watch_notifications_total "):
            counts["notifications"] = float(line.rsplit(" ", 1)[1])
    return counts


def memory_share(before: dict[str, float], after: dict[str, float]) -> str:
    """The share of the held arrivals between two reads of ``arrivals_by_read`` answered from memory."""
    memory = after.get("memory", 0) - before.get("memory", 0)
    total = memory + after.get("database", 0) - before.get("database", 0)
    return f"{memory / total:.0%} of {total:,.0f}" if total else "none"


def bench_world(
    *,
    agents: int,
    pools: int,
    budget: float,
    heartbeat: float,
    watch: bool,
    bench_db: str,
    addresses: int,
    nginx: bool,
) -> BenchWorld:
    """The world for ``agents`` agents in ``pools`` pools of disruption budget ``budget`` (see the module)."""
    database_url, admin_url = database_urls(os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL, bench_db)
    recreate_database(admin_url, bench_db)
    broker = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15")
    if not broker.startswith("redis://"):
        raise SystemExit("the efficiency benchmark runs on Redis: set CELERY_BROKER_URL=redis://…")
    port = free_port()
    run_dir = BASE_DIR / ".run" / f"bench-{bench_db}"
    run_dir.mkdir(parents=True, exist_ok=True)
    from rollout.release.keys import generate_private_key, spki_pin

    key = generate_private_key()
    listen = [f"127.0.0.{index + 1}" for index in range(addresses)]
    env = {
        "DATABASE_URL": database_url,
        "DATABASE_CONN_MAX_AGE": "60",
        "CELERY_BROKER_URL": broker,
        "CELERY_TASK_DEFAULT_QUEUE": f"bench-{uuid.uuid4().hex[:8]}",
        "ROLLOUT_RUN_DIR": str(run_dir),
        "ROLLOUT_RELEASE_PINS": spki_pin(key.public_key()),
        "ROLLOUT_DOWNLOADS_URL": f"http://127.0.0.1:{port}/api/compute/downloads",
        "ROLLOUT_EVERY": "30",
        # The server's interval is what online/offline is judged by: never shorter than the agents'.
        "FLEET_HEARTBEAT_SECONDS": str(max(10, math.ceil(heartbeat))),
        # Agents faster than the server's interval: 5 requests per their own beat, not per the server's. Watching
        # agents at a long interval: 10, as docs/operations.md#request-limits advises (an upgrade's 4 requests).
        "AGENT_TOKEN_RATE": f"{(10 if watch else 5) * math.ceil(max(10, math.ceil(heartbeat)) / heartbeat)}/heartbeat",
        "LOG_LEVEL": "WARNING",
        "DJANGO_ALLOWED_HOSTS": ",".join(["localhost", *listen]),
        # As production runs it (docker-compose.yml): every process's samples summed at /metrics, which the
        # benchmark reads (the arrivals answered from memory).
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir(run_dir)),
        "METRICS_PUBLIC": "1",
        **(nginx_env(run_dir) if nginx else {}),
    }
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from fleet.models import Node
    from fleet.services.iam import tenant_create
    from fleet.services.pools import pool_create
    from fleet.tokens import new_token, token_hash
    from rollout.registry.binaries import release_binary_store
    from rollout.registry.releases import release_register
    from rollout.release.dsse import envelope_to_bytes, sign_envelope
    from rollout.release.manifest import manifest_for, manifest_to_bytes

    call_command("migrate", verbosity=0)
    tenant = tenant_create(slug="bench")
    for sequence, version in enumerate(("1.0.0", "1.1.0"), start=1):
        binary = f"bcd {version}\n".encode() * 4096
        manifest = manifest_for(
            version=version, sequence=sequence, binaries={"linux-amd64": binary}, protocol_version=3
        )
        release_register(envelope=envelope_to_bytes(sign_envelope(manifest_to_bytes(manifest), [key])))
        release_binary_store(version=version, platform="linux-amd64", source=io.BytesIO(binary))
    pool_rows = [pool_create(tenant=tenant, name=f"pool-{p}", disruption_budget=str(budget)) for p in range(pools)]
    # Nodes bulk-inserted (as node_create makes them: no spec.daemon, no session until the agent joins):
    # node_create one by one, with its audit row, takes minutes at 10,000.
    tokens = [(f"node-{i:05d}", new_token("at")) for i in range(agents)]
    Node.objects.bulk_create(
        (
            Node(
                tenant=tenant,
                pool=pool_rows[i % pools],
                name=name,
                arch="amd64",
                spec={"daemon": None},
                agent_token_hash=token_hash(token),
            )
            for i, (name, token) in enumerate(tokens)
        ),
        batch_size=5000,
    )
    return BenchWorld(
        env=env, database_url=database_url, port=port, listen=listen, run_dir=run_dir, tenant=tenant,
        pools=pool_rows, tokens=tokens,
    )  # fmt: skip
