"""What a simulated agent verifies before it runs a binary, and what it reports (docs/signing.md), against a fake
agent API (httpx.MockTransport). Every code against a live server: tests/integration/test_trust_end_to_end.py."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import httpx
import pytest

from rollout.release.root import Root, sign_root
from simulator import AgentConfig, Fleet
from tests.factories import pin, release_key
from tests.simulator.conftest import signed_section
from tests.simulator.test_units import FakeServer, run_fake

PAST = datetime(2020, 1, 1, tzinfo=UTC)


def refused_reports(server: FakeServer) -> list[dict]:
    return [body["refused"] for body in server.session_posts() if "refused" in body]


def test_a_release_not_signed_by_a_pinned_key_is_refused_unfetched_and_reported_until_heard():
    server = FakeServer()
    server.binaries = {"/b": b"new"}
    server.spec = {"daemon": signed_section("2.0.0", b"new", url="http://server/b", keys=(9,))}
    # The first call brings the spec; the next one, which carries the refusal, fails: it goes again.
    server.failures = [httpx.Response(200, json={"spec": server.spec, "commands": []}), httpx.Response(500)]

    def until(fleet: Fleet) -> bool:
        return len(refused_reports(server)) >= 2 and fleet.agents[0].heartbeats >= 4

    fleet = run_fake(server, AgentConfig(token="t"), until=until)
    first, again = refused_reports(server)[:2]
    assert first == again
    assert (first["version"], first["code"]) == ("2.0.0", "bad_signature")
    assert "Against root 1" in first["detail"]
    assert len(refused_reports(server)) == 2  # heard once: not repeated
    assert not [path for _, path, _ in server.calls if path == "/b"]  # nothing downloaded
    assert [r.reason for r in fleet.agents[0].refusals] == ["bad_signature"]


def section_of(version: str = "2.0.0", data: bytes = b"new", *, sequence: int = 6, **release) -> dict:
    """A section of ``version`` at http://server/b (which serves b"new"), signed by key 0 unless told."""
    return signed_section(version, data, url="http://server/b", sequence=sequence, **release)


@pytest.mark.parametrize(
    ("section", "code"),
    [
        (lambda: {**section_of(), "release": None}, "bad_signature"),
        (lambda: {**section_of(), "version": "2.0.1"}, "wrong_version"),
        (lambda: section_of(expires=PAST), "expired"),
        (lambda: section_of(sequence=4), "sequence_rollback"),
        (lambda: section_of(arch="arm64"), "digest_mismatch"),
        # Bytes unlike the spec's sha256 (and the manifest's): fetched 3 times, then reported as a failed download.
        (lambda: section_of(data=b"signed"), "download_failed"),
        # Bytes the spec names (the server meant them) that the release keys did not sign: no retry can help.
        (lambda: {**section_of(data=b"signed"), "sha256": hashlib.sha256(b"new").hexdigest()}, "digest_mismatch"),
    ],
    ids=[
        "no-envelope",
        "wrong-version",
        "expired",
        "rollback",
        "no-binary-for-the-platform",
        "bytes-unlike-the-spec",
        "bytes-not-signed",
    ],
)
def test_each_check_refuses_with_its_code_and_the_agent_never_runs_the_bytes(section, code):
    server = FakeServer()
    server.binaries = {"/b": b"new"}
    server.spec = {"daemon": section()}
    fleet = run_fake(
        server, AgentConfig(token="t", confirmed_sequence=5), until=lambda f: bool(refused_reports(server))
    )
    assert refused_reports(server)[0]["code"] == code
    assert fleet.agents[0].upgrades == []
    assert fleet.agents[0].version == "1.0.0"


def root(version: int, pins: list[int], signers: tuple[int, ...], threshold: int = 1) -> dict:
    envelope = sign_root(Root(version=version, pins=tuple(pin(i) for i in pins), threshold=threshold),
                         [release_key(i) for i in signers])  # fmt: skip
    return envelope


def test_the_agent_follows_the_chain_when_the_root_version_moves_or_a_release_does_not_verify():
    """Root 2 replaces key 0 by key 1. The first answer still says rootVersion 1 (a stale cache): the
    release signed by key 1 does not verify against root 1, so the agent asks for roots once before deciding."""
    server = FakeServer()
    server.binaries = {"/b": b"new"}
    server.roots = [root(2, [1], signers=(0, 1))]
    server.spec = {"daemon": signed_section("2.0.0", b"new", url="http://server/b", keys=(1,))}
    fleet = run_fake(server, AgentConfig(token="t"), until=lambda f: f.agents[0].version == "2.0.0")
    agent = fleet.agents[0]
    assert agent.trust.root_version == 2
    assert agent.refusals == []
    assert [call[1] for call in server.calls].count("/api/compute/agent/release-roots") == 1
    # A release still signed by the key rotated out is refused, whatever the server announces.
    server.spec = {"daemon": signed_section("3.0.0", b"newer", url="http://server/b", keys=(0,), sequence=3)}
    server.root_version = 2
    fleet_two = run_fake(server, AgentConfig(token="t2"), until=lambda f: bool(f.agents[0].refusals))
    assert [r.reason for r in fleet_two.agents[0].refusals] == ["bad_signature"]


@pytest.mark.parametrize(
    "roots",
    [
        lambda: [root(2, [1], signers=(1,))],  # not signed by root 1's key: a forged root
        lambda: [root(2, [1], signers=(0,))],  # not signed by its own key
        lambda: [root(3, [1], signers=(0, 1))],  # a skipped version
        lambda: [root(2, [1], signers=(0, 1)), root(2, [2], signers=(0, 2))],  # a fork: version 2 again
    ],
    ids=["forged", "not-self-signed", "skipped", "fork"],
)
def test_a_root_step_that_does_not_verify_is_refused_as_bad_root(roots):
    server = FakeServer()
    server.binaries = {"/b": b"new"}
    server.roots = roots()
    server.root_version = 1 + len(server.roots)
    server.spec = {"daemon": signed_section("2.0.0", b"new", url="http://server/b", keys=(0, 1, 2))}
    fleet = run_fake(server, AgentConfig(token="t"), until=lambda f: bool(refused_reports(server)))
    assert refused_reports(server)[0]["code"] == "bad_root"
    assert fleet.agents[0].upgrades == []


def test_the_agent_learns_the_sequence_of_the_release_it_runs_from_its_verified_spec():
    server = FakeServer()
    server.spec = {"daemon": signed_section("1.0.0", b"running", url="http://server/b", sequence=7)}
    fleet = run_fake(server, AgentConfig(token="t"), until=lambda f: f.agents[0].confirmed_sequence == 7)
    assert fleet.agents[0].refusals == []
    # Signed by a key it does not trust: nothing learned.
    server.spec = {"daemon": signed_section("1.0.0", b"running", url="http://server/b", sequence=9, keys=(9,))}
    fleet = run_fake(server, AgentConfig(token="t"), until=lambda f: f.agents[0].heartbeats >= 3)
    assert fleet.agents[0].confirmed_sequence is None


def test_without_pins_an_agent_runs_nothing():
    server = FakeServer()
    server.binaries = {"/b": b"new"}
    server.spec = {"daemon": signed_section("2.0.0", b"new", url="http://server/b")}
    run_fake(server, AgentConfig(token="t"), until=lambda f: bool(refused_reports(server)), release_pins=[])
    assert refused_reports(server)[0]["code"] == "bad_signature"
