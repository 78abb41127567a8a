"""The engine benchmark's database, Django set-up and fleet fixtures (in-process, on its own database)."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

BENCH_DATABASE = "rollout_bench_engine"
POOLS = 4
BUDGET = "0.05"
OLD, NEW = "0.9.0", "1.0.0"


def setup_django(db_url: str, queue: str) -> None:
    """Configure Django in-process on the bench database (before anything imports settings)."""
    from django.apps import apps

    if apps.ready:
        from django.conf import settings

        name = settings.DATABASES["default"]["NAME"]
        if name != BENCH_DATABASE:
            raise RuntimeError(f"Django is already set up on {name!r}; the engine benchmark needs its own database.")
        return
    os.environ["DJANGO_SETTINGS_MODULE"] = "project.settings"
    os.environ["DATABASE_URL"] = db_url
    os.environ["DATABASE_CONN_MAX_AGE"] = "0"
    os.environ["DJANGO_DEBUG"] = "false"
    os.environ["CELERY_TASK_ALWAYS_EAGER"] = "false"
    os.environ["CELERY_TASK_DEFAULT_QUEUE"] = queue
    if not os.environ.get("CELERY_BROKER_URL", "").startswith(("redis://", "rediss://")):
        os.environ["CELERY_BROKER_URL"] = "memory://"
    os.environ.setdefault("ROLLOUT_RUN_DIR", tempfile.mkdtemp(prefix="bench-engine-"))
    import django

    django.setup()
    devnull = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(devnull)


def configure(run_dir: Path) -> None:
    from django.conf import settings

    from tests.factories import rollout_settings

    settings.ROLLOUT = rollout_settings()  # pins of key 0, downloads URL on 127.0.0.1
    settings.MEDIA_ROOT = run_dir / "media"
    settings.FLEET_MIN_PROTOCOL_VERSION = 2
    settings.FLEET_HEARTBEAT_SECONDS = 10


def migrate() -> None:
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


def register_releases() -> None:
    """OLD and NEW, registered with their binaries stored (a rollout is refused a platform without one)."""
    import io

    from rollout.registry.binaries import release_binary_store
    from rollout.registry.releases import release_register
    from tests.factories import binary_bytes, manifest, signed

    for version, sequence in ((OLD, 1), (NEW, 2)):
        release_register(envelope=signed(manifest(version, sequence)))
        for arch in ("amd64", "arm64"):
            data = io.BytesIO(binary_bytes(version, arch))
            release_binary_store(version=version, platform=f"linux-{arch}", source=data)


def vacuum(*tables: str) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"VACUUM ANALYZE {connection.ops.quote_name(table)}")


def vacuum_all() -> None:
    from fleet.models import Node, NodeSession
    from rollout.models import NodeUpgrade

    vacuum(NodeUpgrade._meta.db_table, Node._meta.db_table, NodeSession._meta.db_table)


def make_fleet(slug: str, nodes: int) -> tuple[Any, list]:
    """A tenant with ``nodes`` nodes in POOLS pools (budget 5 %), agents joined on OLD (factories.fleet)."""
    from fleet.services.iam import tenant_create
    from tests.factories import fleet

    tenant = tenant_create(slug=slug)
    sizes = [nodes // POOLS + (1 if i < nodes % POOLS else 0) for i in range(POOLS)]
    fleet(tenant, {f"{slug}-{i}": (size, BUDGET) for i, size in enumerate(sizes)}, version=OLD)
    from fleet.models import Pool

    return tenant, list(Pool.objects.filter(tenant=tenant).order_by("id"))


def heartbeat_all() -> None:
    """Every agent heartbeats now, so no node counts as offline however long the run takes."""
    from django.utils import timezone

    from fleet.models import NodeSession

    NodeSession.objects.filter(left_at__isnull=True).update(last_seen_at=timezone.now())


def drop_rollout(rollout_id: Any) -> None:
    """Delete a rollout and its rows (NodeUpgrade by one DELETE, not the ORM's collector)."""
    from django.db import connection

    from rollout.models import NodeUpgrade, Rollout

    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {NodeUpgrade._meta.db_table} WHERE rollout_id = %s", [rollout_id])  # noqa: S608
    Rollout.objects.filter(pk=rollout_id).delete()
    vacuum(NodeUpgrade._meta.db_table)
