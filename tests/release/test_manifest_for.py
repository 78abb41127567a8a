"""manifest_for: a manifest for binaries held in memory, validated like any parsed one."""

import hashlib

import pytest

from rollout.release.errors import ReleaseError
from rollout.release.manifest import manifest_for, manifest_to_bytes, parse_manifest


def test_manifest_for_hashes_the_bytes_and_round_trips():
    manifest = manifest_for(version="1.2.3", sequence=4, binaries={"linux-amd64": b"abc"}, protocol_version=3)
    assert manifest.binaries["linux-amd64"].sha256 == hashlib.sha256(b"abc").hexdigest()
    assert manifest.binaries["linux-amd64"].size == 3
    assert parse_manifest(manifest_to_bytes(manifest)) == manifest


def test_manifest_for_refuses_what_a_parsed_manifest_would():
    with pytest.raises(ReleaseError) as caught:
        manifest_for(version="-bad", sequence=1, binaries={"linux-amd64": b""})
    assert caught.value.code == "invalid_manifest"
