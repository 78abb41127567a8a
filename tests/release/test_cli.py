"""``python -m rollout.release`` run as a subprocess, as an operator runs it: no settings, no database."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rollout.release import dsse
from tests.release.clitools import ROOT, ok, pin, refused, run, sign_new


def test_keygen_writes_a_0600_key_and_prints_its_pin(work: Path) -> None:
    key = work / "a.pem"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert key.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert pin(work, "a").startswith("sha256/")
    assert pin(work, "a") != pin(work, "b")


def test_keygen_refuses_to_overwrite(work: Path) -> None:
    before = (work / "a.pem").read_bytes()
    assert "already exists" in refused("keygen", "--out", work / "a.pem")
    assert (work / "a.pem").read_bytes() == before


def test_keygen_mode_is_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        ok("keygen", "--out", tmp_path / "k.pem")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "k.pem").stat().st_mode) == 0o600


def test_pin_of_private_and_public_key(work: Path, tmp_path: Path) -> None:
    assert ok("pin", work / "a.pem").stdout.strip() == pin(work, "a")
    public = tmp_path / "a.pub.pem"
    subprocess.run(["openssl", "pkey", "-in", work / "a.pem", "-pubout", "-out", public], check=True)
    assert ok("pin", public).stdout.strip() == pin(work, "a")


def test_pin_refusals(work: Path, tmp_path: Path) -> None:
    assert "No such file" in refused("pin", tmp_path / "missing.pem")
    assert "not a public or private key" in refused("pin", work / "bcd-amd64")


def test_sign_add_verify(work: Path, tmp_path: Path) -> None:
    release = tmp_path / "release.json"
    result = sign_new(work, release)
    assert result.returncode == 0, result.stderr
    assert pin(work, "a") in result.stdout

    envelope = json.loads(release.read_text())
    manifest = json.loads(dsse.parse_envelope(release.read_bytes()).payload)
    assert manifest == {
        "product": "bcd",
        "version": "1.4.0",
        "sequence": 7,
        "protocolVersion": 3,
        "notes": "first",
        "binaries": {
            "linux-amd64": {
                "sha256": hashlib.sha256((work / "bcd-amd64").read_bytes()).hexdigest(),
                "size": (work / "bcd-amd64").stat().st_size,
            },
            "linux-arm64": {
                "sha256": hashlib.sha256((work / "bcd-arm64").read_bytes()).hexdigest(),
                "size": (work / "bcd-arm64").stat().st_size,
            },
        },
    }
    assert [s["keyid"] for s in envelope["signatures"]] == [pin(work, "a")]

    both = ("--pin", pin(work, "a"), "--pin", pin(work, "b"))
    stderr = refused("verify", *both, "--threshold", "2", release)
    assert "error: threshold_not_met: Valid signatures from 1 of the 2 required" in stderr

    ok("sign", "--key", work / "b.pem", "--envelope", release)
    after = json.loads(release.read_text())
    assert after["payload"] == envelope["payload"]
    assert [s["keyid"] for s in after["signatures"]] == [pin(work, "a"), pin(work, "b")]

    result = ok("verify", *both, "--threshold", "2", release)
    assert json.loads(result.stdout) == manifest
    assert "2 distinct pinned key(s)" in result.stderr

    assert "already signed" in refused("sign", "--key", work / "b.pem", "--envelope", release)


def test_add_signature_to_another_file(work: Path, tmp_path: Path) -> None:
    release = tmp_path / "release.json"
    assert sign_new(work, release).returncode == 0
    original = release.read_bytes()
    ok("sign", "--key", work / "b.pem", "--envelope", release, "--out", tmp_path / "two.json")
    assert release.read_bytes() == original
    ok("verify", "--pin", pin(work, "a"), "--pin", pin(work, "b"), "--threshold", "2", tmp_path / "two.json")


def test_sign_with_two_keys_at_once(work: Path, tmp_path: Path) -> None:
    release = tmp_path / "release.json"
    ok(
        "sign",
        "--key",
        work / "a.pem",
        "--key",
        work / "b.pem",
        "--version",
        "2.0.0",
        "--sequence",
        "8",
        "--binary",
        f"linux-amd64={work / 'bcd-amd64'}",
        "--out",
        release,
    )
    result = ok("verify", "--pin", pin(work, "b"), "--pin", pin(work, "a"), "--threshold", "2", release)
    assert "protocolVersion" not in json.loads(result.stdout)


def test_sign_refusals(work: Path, tmp_path: Path) -> None:
    release = tmp_path / "release.json"
    assert sign_new(work, release).returncode == 0
    assert "already exists" in refused(*sign_new_args(work, release))
    assert "error: invalid_manifest: " in refused(*sign_new_args(work, tmp_path / "x.json", version="bad/version"))
    assert "'sequence'" in refused(*sign_new_args(work, tmp_path / "x.json", sequence="0"))
    assert "platform" in refused(*sign_new_args(work, tmp_path / "x.json", platform="darwin-amd64"))
    assert "cannot read binary" in refused(*sign_new_args(work, tmp_path / "x.json", binary=tmp_path / "nope"))
    assert "cannot read key file" in refused(*sign_new_args(work, tmp_path / "x.json", key=tmp_path / "nope.pem"))
    assert "not a private key" in refused(*sign_new_args(work, tmp_path / "x.json", key=work / "bcd-amd64"))
    assert "needs --version" in refused("sign", "--key", work / "a.pem", "--out", tmp_path / "x.json")
    assert "cannot be combined" in refused("sign", "--key", work / "b.pem", "--envelope", release, "--version", "9.9.9")
    assert "twice" in refused("sign", "--key", work / "a.pem", "--key", work / "a.pem", "--envelope", release)
    assert not (tmp_path / "x.json").exists()


def sign_new_args(
    work: Path,
    out: Path,
    *,
    version: str = "1.0.0",
    sequence: str = "1",
    platform: str = "linux-amd64",
    binary: Path | None = None,
    key: Path | None = None,
) -> list[str | Path]:
    return [
        "sign",
        "--key",
        key or work / "a.pem",
        "--version",
        version,
        "--sequence",
        sequence,
        "--binary",
        f"{platform}={binary or work / 'bcd-amd64'}",
        "--out",
        out,
    ]


def test_add_signature_refuses_a_damaged_envelope(work: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.json"
    damaged.write_text('{"payloadType": "x"')
    assert "error: invalid_envelope: " in refused("sign", "--key", work / "b.pem", "--envelope", damaged)


def test_verify_refusals(work: Path, tmp_path: Path) -> None:
    release = tmp_path / "release.json"
    assert sign_new(work, release).returncode == 0
    assert "error: threshold_not_met: " in refused("verify", "--pin", pin(work, "b"), release)
    assert "does not start with" in refused("verify", "--pin", "nonsense", release)
    assert "--threshold must be at least 1" in refused("verify", "--pin", pin(work, "a"), "--threshold", "0", release)
    assert "No such file" in refused("verify", "--pin", pin(work, "a"), tmp_path / "missing.json")
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (dsse.MAX_ENVELOPE_BYTES + 10))
    assert "error: invalid_envelope: The envelope is" in refused("verify", "--pin", pin(work, "a"), big)
    tampered = tmp_path / "tampered.json"
    envelope = json.loads(release.read_text())
    envelope["payloadType"] = "application/json"
    tampered.write_text(json.dumps(envelope))
    assert "error: wrong_payload_type: " in refused("verify", "--pin", pin(work, "a"), tampered)


@pytest.mark.parametrize("verb", ["keygen", "pin", "sign", "verify"])
def test_help_of_each_verb(verb: str) -> None:
    result = ok(verb, "--help")
    assert result.stdout.startswith(f"usage: python -m rollout.release {verb}")


def test_help_and_usage_errors() -> None:
    assert "keygen" in ok("--help").stdout
    result = run()
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    result = run("sign", "--key", "k.pem", "--sequence", "seven")
    assert result.returncode == 2
    assert "not a non-negative integer" in result.stderr


def test_the_package_imports_no_django() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, rollout.release, rollout.release.cli; "
            "assert not [m for m in sys.modules if m.split('.')[0] == 'django'], 'django imported'",
        ],
        capture_output=True,
        text=True,
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert result.returncode == 0, result.stderr
