"""The root chain, manifest expiry and the agent's checks, offline (docs/signing.md): library, CLI, interop."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from securesystemslib.dsse import Envelope
from securesystemslib.signer import CryptoSigner, SSlibKey

from rollout.release import dsse, keys
from rollout.release.agent import AgentTrust, Refused
from rollout.release.errors import ReleaseError
from rollout.release.manifest import format_timestamp, parse_manifest, parse_timestamp
from rollout.release.root import (
    ROOT_PAYLOAD_TYPE,
    Root,
    parse_root,
    root_from_pins,
    root_to_bytes,
    sign_root,
    verify_chain,
    verify_root_step,
)
from tests.release.clitools import ok, pin, refused, run
from tests.release.conftest import manifest_bytes, pin_of

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def raw(envelope: dict) -> bytes:
    return dsse.envelope_to_bytes(envelope)


# --- timestamps and manifest expiry -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2030-01-31T12:00:00Z", datetime(2030, 1, 31, 12, tzinfo=UTC)),
        ("2030-01-31T12:00:00.5Z", datetime(2030, 1, 31, 12, 0, 0, 500000, tzinfo=UTC)),
        ("2030-01-31T12:00:00.123456789Z", datetime(2030, 1, 31, 12, 0, 0, 123456, tzinfo=UTC)),
    ],
)
def test_timestamps_are_rfc3339_utc(text: str, expected: datetime) -> None:
    assert parse_timestamp(text) == expected
    assert parse_timestamp(format_timestamp(expected)) == expected


@pytest.mark.parametrize(
    "text",
    [
        "2030-01-31T12:00:00",  # no zone
        "2030-01-31T12:00:00+00:00",  # an offset, not Z
        "2030-01-31t12:00:00z",  # lower case
        "2030-01-31 12:00:00Z",  # a space
        "2030-02-30T12:00:00Z",  # no such day
        "2030-01-31T12:00:60Z",  # a leap second
        "2030-01-31T12:00:00.Z",  # an empty fraction
        "2030-01-31T12:00:00.1234567890Z",  # ten digits
        "\uff12\uff10\uff13\uff10-01-31T12:00:00Z",  # non-ASCII digits
        20300131,
    ],
)
def test_other_timestamps_are_refused(text: object) -> None:
    with pytest.raises(ValueError, match=r"RFC 3339|not a valid date"):
        parse_timestamp(text)
    with pytest.raises(ReleaseError) as info:
        parse_manifest(manifest_bytes(expires=text))
    assert info.value.code == "invalid_manifest"
    assert "'expires'" in info.value.detail


def test_a_manifest_may_carry_expires() -> None:
    manifest = parse_manifest(manifest_bytes(expires="2030-01-31T12:00:00Z"))
    assert manifest.expires == datetime(2030, 1, 31, 12, tzinfo=UTC)
    assert manifest.expired(manifest.expires)
    assert not manifest.expired(manifest.expires - timedelta(seconds=1))
    assert parse_manifest(manifest_bytes()).expires is None


def test_sign_expires_puts_it_in_the_signed_manifest(work: Path, tmp_path: Path) -> None:
    out = tmp_path / "release.json"
    ok("sign", "--key", work / "a.pem", "--version", "2.0.0", "--sequence", "9", "--binary",
       f"linux-amd64={work / 'bcd-amd64'}", "--expires", "2031-06-01T00:00:00Z", "--out", out)  # fmt: skip
    verified = dsse.verify_envelope(out.read_bytes(), pins=[pin(work, "a")], threshold=1)
    assert verified.manifest.expires == datetime(2031, 6, 1, tzinfo=UTC)
    bad = run("sign", "--key", work / "a.pem", "--version", "2.0.0", "--sequence", "9", "--binary",
              f"linux-amd64={work / 'bcd-amd64'}", "--expires", "tomorrow", "--out", tmp_path / "x.json")  # fmt: skip
    assert bad.returncode == 2  # a malformed command line
    assert "RFC 3339" in bad.stderr


# --- roots -------------------------------------------------------------------------------------


def root_payload(**fields: object) -> bytes:
    return json.dumps({"type": "root", "version": 2, "pins": [pin_of_a], "threshold": 1, **fields}).encode()


pin_of_a = "sha256/" + "A" * 43 + "="


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"type": "release"}, "'type'"),
        ({"version": "2"}, "'version'"),
        ({"version": 0}, "'version'"),
        ({"version": 2.0}, "'version'"),
        ({"pins": []}, "'pins'"),
        ({"pins": ["sha256/nope"]}, "malformed pin"),
        ({"pins": [pin_of_a, pin_of_a]}, "twice"),
        ({"threshold": 2}, "'threshold'"),
        ({"threshold": 0}, "'threshold'"),
        ({"threshold": True}, "'threshold'"),
        ({"expires": "soon"}, "'expires'"),
        ({"extra": 1}, "unknown"),
    ],
)
def test_a_malformed_root_is_invalid_root(fields: dict, needle: str) -> None:
    with pytest.raises(ReleaseError) as info:
        parse_root(root_payload(**fields))
    assert info.value.code == "invalid_root"
    assert needle in info.value.detail


def test_duplicate_keys_and_missing_fields_are_invalid_root() -> None:
    for payload in (b'{"type": "root", "type": "root"}', b'{"type": "root", "version": 2, "pins": []}', b"[]"):
        with pytest.raises(ReleaseError) as info:
            parse_root(payload)
        assert info.value.code == "invalid_root"


@pytest.fixture
def chain(key_a, key_b, key_c, outsider):
    """Root 1 = {a} (the configuration); root 2 = {b, c} threshold 2, signed by a and by b and c."""
    one = root_from_pins([pin_of(key_a)], 1)
    two = Root(version=2, pins=(pin_of(key_b), pin_of(key_c)), threshold=2)
    return one, two


def test_a_root_signed_by_the_current_keys_and_by_its_own_is_the_next(chain, key_a, key_b, key_c) -> None:
    one, two = chain
    verified = verify_root_step(one, raw(sign_root(two, [key_a, key_b, key_c])))
    assert verified.root == two
    assert verified.signed_by_previous == (pin_of(key_a),)
    assert set(verified.signed_by_itself) == {pin_of(key_b), pin_of(key_c)}
    assert verify_chain(one, [raw(sign_root(two, [key_a, key_b, key_c]))]) == two


@pytest.mark.parametrize(
    ("signers", "needle"),
    [
        (("key_b", "key_c"), "Not signed by the keys of root 1"),  # the new keys alone: a takeover
        (("key_a",), "Not signed by its own keys"),  # the old key alone: nobody holds the new ones
        (("key_a", "key_b"), "Not signed by its own keys"),  # one of two new keys
        (("outsider", "key_b", "key_c"), "Not signed by the keys of root 1"),
    ],
)
def test_both_key_sets_must_sign(request, chain, signers, needle) -> None:
    one, two = chain
    envelope = sign_root(two, [request.getfixturevalue(name) for name in signers])
    with pytest.raises(ReleaseError) as info:
        verify_root_step(one, raw(envelope))
    assert info.value.code == "threshold_not_met"
    assert needle in info.value.detail


def test_skipped_versions_and_forks_are_root_version(chain, key_a, key_b, key_c) -> None:
    one, two = chain
    three = Root(version=3, pins=(pin_of(key_b),), threshold=1)
    with pytest.raises(ReleaseError) as info:
        verify_root_step(one, raw(sign_root(three, [key_a, key_b])))  # 1 -> 3
    assert info.value.code == "root_version"
    fork = Root(version=2, pins=(pin_of(key_c),), threshold=1)
    with pytest.raises(ReleaseError) as info:
        verify_chain(one, [raw(sign_root(two, [key_a, key_b, key_c])), raw(sign_root(fork, [key_a, key_c]))])
    assert info.value.code == "root_version"


def test_a_release_envelope_is_not_a_root(chain, key_a) -> None:
    one, _ = chain
    with pytest.raises(ReleaseError) as info:
        verify_root_step(one, raw(dsse.sign_envelope(root_to_bytes(Root(2, (pin_of(key_a),), 1)), [key_a])))
    assert info.value.code == "invalid_root"
    assert ROOT_PAYLOAD_TYPE in info.value.detail


def test_a_securesystemslib_root_envelope_verifies_like_the_clis(chain, key_a, key_b, key_c) -> None:
    """Interop: a root signed with securesystemslib's DSSE (plus the key extension) is the same root."""
    one, two = chain
    envelope = Envelope(payload=root_to_bytes(two), payload_type=ROOT_PAYLOAD_TYPE, signatures={})
    for private_key in (key_a, key_b, key_c):
        signer = CryptoSigner(private_key, SSlibKey.from_crypto(private_key.public_key(), keyid=pin_of(private_key)))
        envelope.sign(signer).unrecognized_fields["extension"] = dsse.key_extension(private_key.public_key())
    ours = verify_root_step(one, raw(sign_root(two, [key_a, key_b, key_c])))
    theirs = verify_root_step(one, json.dumps(envelope.to_dict()).encode())
    assert (theirs.root, theirs.payload_sha256) == (ours.root, ours.payload_sha256)
    # And securesystemslib verifies ours.
    parsed = Envelope.from_dict(json.loads(raw(sign_root(two, [key_b, key_c]))))
    sslib_keys = [SSlibKey.from_crypto(k.public_key(), keyid=pin_of(k)) for k in (key_b, key_c)]
    assert set(parsed.verify(sslib_keys, 2)) == {pin_of(key_b), pin_of(key_c)}


def test_root_sign_add_a_signature_and_verify_a_chain_with_the_cli(work: Path, tmp_path: Path) -> None:
    """Root 1 = {a}; root 2 = {b}: a writes and signs it, b adds a signature; verify walks 1 -> 2."""
    root2 = tmp_path / "root2.json"
    a, b = pin(work, "a"), pin(work, "b")
    ok("root", "sign", "--key", work / "a.pem", "--version", "2", "--pin", b, "--threshold", "1", "--out", root2)
    error = refused("root", "verify", "--pin", a, "--threshold", "1", root2)
    assert "error: threshold_not_met: Not signed by its own keys" in error
    ok("root", "sign", "--key", work / "b.pem", "--envelope", root2)
    verified = ok("root", "verify", "--pin", a, "--threshold", "1", root2)
    assert json.loads(verified.stdout) == {"version": 2, "pins": [b], "threshold": 1}
    # Root 3 signed by b only skips nothing; signed for version 4 it skips 3.
    root4 = tmp_path / "root4.json"
    ok("root", "sign", "--key", work / "b.pem", "--key", work / "a.pem", "--version", "4", "--pin", a,
       "--threshold", "1", "--out", root4)  # fmt: skip
    assert "error: root_version:" in refused("root", "verify", "--pin", a, "--threshold", "1", root2, root4)
    # Another root 1: the chain does not start from it.
    other = pin_of(keys.generate_private_key())
    assert "threshold_not_met" in refused("root", "verify", "--pin", other, "--threshold", "1", root2)
    assert "already exists" in refused(
        "root", "sign", "--key", work / "a.pem", "--version", "2", "--pin", b, "--threshold", "1", "--out", root2
    )


def test_root_sign_refuses_what_the_server_would(work: Path, tmp_path: Path) -> None:
    b = pin(work, "b")
    out = tmp_path / "r.json"
    assert "at least 2" in refused("root", "sign", "--key", work / "a.pem", "--version", "1", "--pin", b,
                                   "--threshold", "1", "--out", out)  # fmt: skip
    assert "invalid_root" in refused("root", "sign", "--key", work / "a.pem", "--version", "2", "--pin", b,
                                     "--threshold", "2", "--out", out)  # fmt: skip
    release = tmp_path / "release.json"
    release.write_bytes(raw(dsse.sign_envelope(manifest_bytes(), [keys.generate_private_key()])))
    assert "invalid_root" in refused("root", "sign", "--key", work / "a.pem", "--envelope", release)


# --- the agent's checks ------------------------------------------------------------------------


def release_envelope(*signers, **manifest_fields) -> dict:
    return json.loads(raw(dsse.sign_envelope(manifest_bytes(**manifest_fields), list(signers))))


def test_the_agent_checks_in_order_and_refuses_at_the_first_failure(key_a, outsider) -> None:
    trust = AgentTrust(pins=[pin_of(key_a)], threshold=1)
    expired = format_timestamp(NOW - timedelta(seconds=1))

    def code(release: object, version: str = "1.4.0", confirmed: int | None = None) -> str:
        with pytest.raises(Refused) as info:
            trust.verify_release(release, version=version, confirmed_sequence=confirmed, now=NOW)
        return info.value.code

    # Several things wrong at once: the first check that fails names the refusal.
    assert code(release_envelope(outsider, expires=expired), version="9.9.9", confirmed=99) == "bad_signature"
    assert code(release_envelope(key_a, expires=expired), version="9.9.9", confirmed=99) == "wrong_version"
    assert code(release_envelope(key_a, expires=expired), confirmed=99) == "expired"
    assert code(release_envelope(key_a), confirmed=8) == "sequence_rollback"
    assert code(release_envelope(key_a, product="other")) == "wrong_version"
    assert code(None) == "bad_signature"
    trusted = trust.verify_release(release_envelope(key_a), version="1.4.0", confirmed_sequence=7, now=NOW)
    binary = trusted.manifest.binaries["linux-amd64"]
    trusted.verify_binary(platform="linux-amd64", size=binary.size, sha256=binary.sha256)
    for platform, size, digest in (("linux-amd64", binary.size + 1, binary.sha256), ("linux-amd64", binary.size,
                                   "f" * 64), ("linux-riscv64", binary.size, binary.sha256)):  # fmt: skip
        with pytest.raises(Refused) as info:
            trusted.verify_binary(platform=platform, size=size, sha256=digest)
        assert info.value.code == "digest_mismatch"


def test_the_agent_follows_the_chain_and_a_key_rotated_out_no_longer_counts(key_a, key_b, key_c) -> None:
    trust = AgentTrust(pins=[pin_of(key_a)], threshold=1)
    two = Root(version=2, pins=(pin_of(key_b), pin_of(key_c)), threshold=2)
    trust.follow([sign_root(two, [key_a, key_b, key_c])])
    assert trust.root == two
    with pytest.raises(Refused) as info:
        trust.verify_release(release_envelope(key_a, key_b), version="1.4.0", confirmed_sequence=None, now=NOW)
    assert info.value.code == "bad_signature"
    trust.verify_release(release_envelope(key_b, key_c), version="1.4.0", confirmed_sequence=None, now=NOW)
    # A forged next step is bad_root, and the root held stays.
    forged = Root(version=3, pins=(pin_of(key_a),), threshold=1)
    with pytest.raises(Refused) as info:
        trust.follow([sign_root(forged, [key_a])])
    assert info.value.code == "bad_root"
    assert trust.root == two
    # An expired newest root: nothing new is installed.
    trust.follow([sign_root(Root(version=3, pins=(pin_of(key_b),), threshold=1, expires=NOW), [key_b, key_c])])
    with pytest.raises(Refused) as info:
        trust.verify_release(release_envelope(key_b), version="1.4.0", confirmed_sequence=None, now=NOW)
    assert info.value.code == "expired"
    assert "Root 3" in info.value.detail
