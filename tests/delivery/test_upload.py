"""`manage.py release upload` streams: its memory does not grow with the file, and an upload killed half-way
leaves nothing served (docs/operations.md#binary-delivery). Real subprocesses, the real command."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from demo.processes import wait_until
from rollout.models import ReleaseBinary
from rollout.registry.releases import release_register
from tests.delivery.conftest import database_url
from tests.factories import manifest, pin, rollout_settings, signed

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
BIG = 200 << 20
RSS_LIMIT_MIB = 100
# Runs the command as its only child: RUSAGE_CHILDREN's peak is that process's peak RSS.
PEAK_RSS = (
    "import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]);"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(done.returncode)"
)


@pytest.fixture(scope="module")
def big_file(tmp_path_factory) -> tuple[Path, str]:
    """200 MiB: random head and tail around a sparse middle (cheap to make; read back as real bytes)."""
    path = tmp_path_factory.mktemp("upload") / "bcd-linux-amd64"
    head, tail = os.urandom(1 << 20), os.urandom(1 << 20)
    with path.open("wb") as out:
        out.write(head)
        out.seek(BIG - len(tail))
        out.write(tail)
    digest = hashlib.sha256()
    with path.open("rb") as source:
        for chunk in iter(lambda: source.read(8 << 20), b""):
            digest.update(chunk)
    return path, digest.hexdigest()


@pytest.fixture
def release(settings, tmp_path, big_file):
    settings.ROLLOUT = rollout_settings()
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.ROLLOUT_DOWNLOADS_OFFLOAD = "none"
    _, sha256 = big_file
    binaries = {"linux-amd64": {"sha256": sha256, "size": BIG}}
    return release_register(envelope=signed(manifest("1.0.0", 1, binaries=binaries))).release


def upload_command(settings, path: Path, *, wrap: bool) -> tuple[list[str], dict[str, str]]:
    command = [sys.executable, "manage.py", "release", "upload", "1.0.0", "linux-amd64", str(path)]
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "ROLLOUT_MEDIA_ROOT": str(settings.MEDIA_ROOT),
        "ROLLOUT_RELEASE_PINS": pin(0),
        "ROLLOUT_DOWNLOADS_OFFLOAD": "none",
        "LOG_LEVEL": "WARNING",
    }
    return ([sys.executable, "-c", PEAK_RSS, *command] if wrap else command), env


def test_a_200_mib_upload_stays_under_100_mib_of_memory(release, settings, big_file, tmp_path):
    path, sha256 = big_file
    tiny = tmp_path / "tiny"
    tiny.write_bytes(b"x" * 1024)
    peaks = {}
    for name, source in (("tiny", tiny), ("big", path)):
        command, env = upload_command(settings, source, wrap=True)
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
        peaks[name] = int(done.stdout.strip().splitlines()[-1]) / 1024  # KiB -> MiB
        assert done.returncode == (1 if name == "tiny" else 0), done.stdout + done.stderr  # tiny: size_mismatch
    print(f"peak RSS of release upload (MiB): {peaks}")
    assert peaks["big"] < RSS_LIMIT_MIB, peaks
    assert peaks["big"] - peaks["tiny"] < 16, peaks  # a chunk or two, not the file: it does not grow with the size
    stored = Path(settings.MEDIA_ROOT) / "bcd/1.0.0/linux-amd64"
    assert stored.stat().st_size == BIG
    assert ReleaseBinary.objects.get(platform="linux-amd64").stored_at is not None
    response = Client().get("/api/compute/downloads/bcd/1.0.0/linux-amd64", HTTP_RANGE="bytes=-16")
    assert response.status_code == 206
    assert response["X-Checksum-Sha256"] == sha256


def test_an_upload_killed_half_way_leaves_nothing_served(release, settings, big_file):
    path, _ = big_file
    command, env = upload_command(settings, path, wrap=False)
    upload = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    directory = Path(settings.MEDIA_ROOT) / "bcd/1.0.0"

    def partial() -> list[Path]:
        return (
            [p for p in directory.glob(".linux-amd64.*.part") if p.stat().st_size >= 8 << 20]
            if directory.exists()
            else []
        )

    try:
        wait_until(lambda: partial() or upload.poll() is not None, timeout=60, poll=0.01, what="a partial upload")
        os.kill(upload.pid, signal.SIGKILL)
    finally:
        upload.wait(timeout=10)
    assert upload.returncode == -signal.SIGKILL, "the upload finished before it could be killed"
    leftovers = list(directory.iterdir())
    assert [p.name for p in leftovers if not p.name.startswith(".")] == []  # nothing under the binary's name
    assert all(p.stat().st_size < BIG for p in leftovers)
    assert ReleaseBinary.objects.get(platform="linux-amd64").stored_at is None
    client = Client()
    for method in (client.get, client.head):
        response = method("/api/compute/downloads/bcd/1.0.0/linux-amd64")
        assert response.status_code == 404
    assert client.get("/api/compute/downloads/bcd/1.0.0/linux-amd64").json()["code"] == "not_found"
