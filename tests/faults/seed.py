"""Migrate and seed a fault test's private database, in its own process: the test process's Django is bound to
another database (pytest-django's), so a private one is written by a child with its own settings.

    python -m tests.faults.seed SEED.json

SEED.json: {"releases": [{"envelope": PATH, "binaries": {"linux-amd64": PATH}}]}. The environment
names the database (DATABASE_URL), the pins (ROLLOUT_RELEASE_PINS) and the media root. Prints
{"key": "<API key with compute:fleet:admin>"} as one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(path: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.core.management import call_command

    # ROLLOUT_EVERY=1 in the environment: migrate creates the rollout/all periodic task every 1 s.
    call_command("migrate", interactive=False, verbosity=0)
    from fleet.models import Permission
    from fleet.services.iam import api_key_create, tenant_create
    from rollout.registry.binaries import release_binary_store
    from rollout.registry.releases import release_register

    seed = json.loads(Path(path).read_text())
    tenant = tenant_create(slug="acme")
    _, key = api_key_create(tenant=tenant, username="faults", grants=[Permission.FLEET_ADMIN])
    for release in seed["releases"]:
        registration = release_register(envelope=Path(release["envelope"]).read_bytes())
        for platform, binary in release["binaries"].items():
            with Path(binary).open("rb") as source:
                release_binary_store(version=registration.release.version, platform=platform, source=source)
    print(json.dumps({"key": key}))


if __name__ == "__main__":
    main(sys.argv[1])
