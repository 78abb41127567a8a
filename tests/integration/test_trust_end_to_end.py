"""Trust on the node end to end (docs/signing.md): simulated agents that verify what they run, against a live
server, worker and beat whose database and storage the test tampers with, as an attacker holding them would.

Every refusal code is reached by real agents: the node never runs the bytes, its upgrade fails at once
(timeouts are minutes, failures come within seconds) with ``refused:<code>``, and the wave's failure ratio
counts it. Then the release keys rotate, two replaced by two, while a rollout runs."""

from __future__ import annotations

import hashlib
import io
import json
from datetime import UTC, datetime

import pytest
from django.utils import timezone

from demo.processes import wait_until
from rollout.models import NodeUpgrade, Release, ReleaseBinary, ReleaseRoot, Rollout, RolloutEvent
from rollout.registry import roots
from rollout.registry.binaries import release_binary_store
from rollout.release.dsse import envelope_to_bytes
from rollout.release.root import Root, sign_root
from simulator import Fleet, build_agent_configs
from tests.factories import binary_bytes, manifest, pin, release_key, rollout_settings, signed

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TIMEOUT = 300  # upgradeTimeoutSeconds: a failure within seconds is a refusal, not a timeout
AGENT = {"heartbeat_seconds": 0.5, "restart_delay": 0.2}


def create(stack, version: str, pool_ids: list[str], **options) -> str:
    body = {"version": version, "poolIds": pool_ids, "waves": [100], "upgradeTimeoutSeconds": TIMEOUT, **options}
    response = stack.client.post("/api/compute/rollouts/", json=body)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def pool_ids(stack) -> dict[str, str]:
    return {pool["name"]: pool["id"] for pool in stack.client.get("/api/compute/pools/").json()["results"]}


def refused(rollout_id: str) -> list[tuple[str, str]]:
    return list(NodeUpgrade.objects.filter(rollout_id=rollout_id, state="failed").values_list("node_id", "reason"))


def assert_refused_at_once(rollout_id: str, code: str, count: int) -> None:
    upgrades = NodeUpgrade.objects.filter(rollout_id=rollout_id)
    assert {(u.state, u.reason) for u in upgrades} == {("failed", f"refused:{code}")}, rollout_id
    assert upgrades.count() == count
    assert all((u.settled_at - u.started_at).total_seconds() < TIMEOUT / 10 for u in upgrades)
    events = RolloutEvent.objects.filter(rollout_id=rollout_id, kind="node_upgrade.refused")
    assert sorted(event.data["code"] for event in events) == [code] * count


def tamper_envelope(version: str, envelope: bytes) -> None:
    """The database in an attacker's hands: another envelope in a registered release's row."""
    Release.objects.filter(version=version).update(envelope=envelope.decode())


def test_every_refusal_code_is_reached_by_real_agents_and_fails_the_upgrade_at_once(stack):
    stack.register("1.0.0", 1)  # what the agents run
    for sequence, version in enumerate(("2.1.0", "2.2.0", "2.3.0", "2.4.0", "2.5.0"), start=2):
        stack.register(version, sequence)
    # digest_mismatch: storage and database agree on other bytes (spec.daemon.sha256 matches them); the signed
    # manifest does not.
    other = b"not the signed bytes of bcd 2.1.0\n" * 64
    ReleaseBinary.objects.filter(release__version="2.1.0").update(size=len(other), sha256=_sha256(other))
    release_binary_store(version="2.1.0", platform="linux-amd64", source=io.BytesIO(other))
    # bad_signature: the same manifest, signed by a key no agent pins.
    tamper_envelope("2.2.0", signed(manifest("2.2.0", 3, archs=("amd64",)), 9))
    # wrong_version: another release's genuine envelope.
    tamper_envelope("2.3.0", Release.objects.get(version="1.0.0").envelope.encode())
    # expired: a genuine signature over a manifest of that version that expired (an old one, withheld updates).
    tamper_envelope("2.4.0", signed(manifest("2.4.0", 5, archs=("amd64",), expires="2021-01-01T00:00:00Z")))
    # sequence_rollback: nothing tampered; these agents confirmed a newer release (sequence 99) earlier.
    codes = {
        "2.1.0": "digest_mismatch",
        "2.2.0": "bad_signature",
        "2.3.0": "wrong_version",
        "2.4.0": "expired",
        "2.5.0": "sequence_rollback",
    }
    enrolled = stack.enroll({version: (2, 1.0) for version in codes})
    configs = []
    for version, agents in enrolled.items():
        confirmed = 99 if codes[version] == "sequence_rollback" else None
        configs += build_agent_configs(agents, daemon_version="1.0.0", confirmed_sequence=confirmed)
    fleet = Fleet(stack.url, configs, release_pins=[pin(0)], seed=4, **AGENT)
    with fleet.start_thread(timeout=180) as running:
        assert running.wait_for(lambda f: f.online_count() == 10, timeout=30)
        pools = pool_ids(stack)
        rollouts = {version: create(stack, version, [pools[version]], maxFailureRatio=0.4) for version in codes}
        wait_until(
            lambda: all(len(refused(rollout_id)) == 2 for rollout_id in rollouts.values()),
            timeout=60,
            what="every agent to refuse and report it",
        )
        # The wave's failure ratio counted the refusals: each rollout paused at once.
        wait_until(
            lambda: all(Rollout.objects.get(pk=r).paused_reason == "failure_ratio" for r in rollouts.values()),
            timeout=30,
            what="the rollouts to pause on their failure ratio",
        )
    for version, rollout_id in rollouts.items():
        assert_refused_at_once(rollout_id, codes[version], 2)
        wave = stack.client.get(f"/api/compute/rollouts/{rollout_id}/").json()["waves"][0]
        assert (wave["failed"], wave["succeeded"]) == (2, 0)
    for agent in fleet.agents:
        assert agent.upgrades == []  # no agent ever ran bytes it refused
        assert agent.version == "1.0.0"
        assert {refusal.reason for refusal in agent.refusals} <= set(codes.values())


def test_two_keys_replaced_by_two_while_a_rollout_runs_then_old_keys_and_forged_roots_are_refused(stack, settings):
    """Root 1 = keys 0 and 1 (threshold 2); root 2 = keys 2 and 3 (threshold 2), signed by all four."""
    settings.ROLLOUT = rollout_settings(
        pins=[pin(0), pin(1)], threshold=2, downloads_url=settings.ROLLOUT["downloadsUrl"], every=1
    )
    stack.register("1.0.0", 1, keys=(0, 1))
    stack.register("2.0.0", 2, keys=(0, 1, 2, 3))  # the new key holders co-signed before the rotation
    enrolled = stack.enroll({"r": (6, 1.0)})
    configs = build_agent_configs(enrolled["r"], daemon_version="1.0.0")
    fleet = Fleet(stack.url, configs, release_pins=[pin(0), pin(1)], release_threshold=2, seed=5, **AGENT)
    pool = [pool_ids(stack)["r"]]
    with fleet.start_thread(timeout=240) as running:
        assert running.wait_for(lambda f: f.online_count() == 6, timeout=30)
        rollout = create(stack, "2.0.0", pool, waves=[33, 100], soakSeconds=3600)  # 2 nodes, then 4
        wait_until(lambda: Rollout.objects.get(pk=rollout).next_wave_at is not None, timeout=60, what="wave 0")

        # The rotation, while the rollout soaks: old and new key holders signed root 2.
        root2 = sign_root(Root(2, (pin(2), pin(3)), 2), [release_key(i) for i in (0, 1, 2, 3)])
        response = stack.client.post("/api/compute/release-roots/", content=envelope_to_bytes(root2))
        assert response.status_code == 201, response.text
        assert stack.client.post(f"/api/compute/rollouts/{rollout}/promote/").status_code == 200
        wait_until(lambda: Rollout.objects.get(pk=rollout).state == "completed", timeout=60, what="completion")
        assert running.wait_for(lambda f: f.versions()["2.0.0"] == 6, timeout=10)
        # The agents that upgraded after the rotation followed the chain (the wave-0 ones had no reason to).
        assert sorted(agent.trust.root_version for agent in fleet.agents) == [1, 1, 2, 2, 2, 2]

        # A release signed by the rotated-out keys: refused at registration ...
        old_keys = signed(manifest("3.0.0", 3, archs=("amd64",)), 0, 1)
        assert stack.client.post("/api/compute/releases/", content=old_keys).json()["code"] == "threshold_not_met"
        # ... and, forced into the database, by every agent.
        _force_release("3.0.0", 3, old_keys)
        forced = create(stack, "3.0.0", pool, maxFailureRatio=1)
        wait_until(lambda: len(refused(forced)) == 6, timeout=60, what="every agent to refuse 3.0.0")
        assert_refused_at_once(forced, "bad_signature", 6)
        # Every node failed: the rollout completes at a tick, and only then are its nodes free for another.
        wait_until(lambda: Rollout.objects.get(pk=forced).state == "completed", timeout=60, what="3.0.0 to end")

        # A root forged into the database (not signed by root 2's keys): every agent refuses to follow it.
        stack.register("4.0.0", 4, keys=(2, 3))
        forged = sign_root(Root(3, (pin(9),), 1), [release_key(9)])
        ReleaseRoot.objects.create(
            version=3, pins=[pin(9)], threshold=1, envelope=json.dumps(forged), recorded_at=timezone.now()
        )
        roots.root_version_forget()  # this process's answers see it now (others within the cache's bound)
        bad_root = create(stack, "4.0.0", pool, maxFailureRatio=1)
        wait_until(lambda: len(refused(bad_root)) == 6, timeout=60, what="every agent to refuse the forged root")
        assert_refused_at_once(bad_root, "bad_root", 6)
    for agent in fleet.agents:
        assert [upgrade.to_version for upgrade in agent.upgrades] == ["2.0.0"]
        assert agent.trust.root_version == 2  # root 3 was never trusted
        assert [refusal.reason for refusal in agent.refusals] == ["bad_signature", "bad_root"]


def _force_release(version: str, sequence: int, envelope: bytes) -> None:
    """A release row as registering would write it, without the check registering makes (an attacker's)."""
    body = manifest(version, sequence, archs=("amd64",))
    payload = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    release = Release.objects.create(
        version=version,
        sequence=sequence,
        payload=payload,
        payload_sha256=_sha256(payload),
        envelope=envelope.decode(),
        registered_at=datetime.now(UTC),
    )
    data = binary_bytes(version)
    ReleaseBinary.objects.create(
        release=release, platform="linux-amd64", arch="amd64", sha256=_sha256(data), size=len(data)
    )
    release_binary_store(version=version, platform="linux-amd64", source=io.BytesIO(data))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
