"""The lock files agree with the readable pins and can be installed with --require-hashes anywhere.

A pin edited in requirements*.txt without `make lock` would leave make and the image installing the
old version: these checks catch that without asking the index.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;#\\]+)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def readable_pins(path: Path) -> dict[str, str]:
    """name -> version of a requirements file, following its -r includes."""
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            pins |= readable_pins(path.parent / line[3:].strip())
        elif line:
            match = PIN.match(line)
            assert match, f"{path.name}: {line!r} is not pinned with =="
            pins[canonical(match[1])] = match[2]
    return pins


def locked(path: Path) -> dict[str, tuple[str, int]]:
    """name -> (version, number of hashes) of a pip-compile lock file."""
    entries: dict[str, tuple[str, int]] = {}
    name = None
    for line in path.read_text().splitlines():
        if line.startswith((" ", "\t")):
            if "--hash=sha256:" in line and name is not None:
                version, hashes = entries[name]
                entries[name] = (version, hashes + 1)
            continue
        name = None
        match = PIN.match(line)
        if match:
            name = canonical(match[1])
            entries[name] = (match[2], 0)
    return entries


@pytest.mark.parametrize(
    ("readable", "lock"), [("requirements.txt", "requirements.lock"), ("requirements-dev.txt", "requirements-dev.lock")]
)
def test_the_lock_has_every_pin_at_its_version_and_every_package_hashed(readable, lock):
    pins = readable_pins(ROOT / readable)
    entries = locked(ROOT / lock)
    assert {"django", "celery", "kombu", "redis"} <= set(entries)  # the parsing works
    assert {name: entries.get(name, ("missing", 0))[0] for name in pins} == pins
    assert [name for name, (_, hashes) in entries.items() if hashes == 0] == []


def test_the_runtime_lock_is_the_dev_lock_restricted_to_runtime():
    """make (dev lock) and the image (runtime lock) run the same versions of the runtime packages."""
    runtime = {name: version for name, (version, _) in locked(ROOT / "requirements.lock").items()}
    dev = {name: version for name, (version, _) in locked(ROOT / "requirements-dev.lock").items()}
    assert {name: dev.get(name) for name in runtime} == runtime


@pytest.mark.parametrize("lock", ["requirements.lock", "requirements-dev.lock"])
def test_the_lock_names_no_machine_local_index(lock):
    text = (ROOT / lock).read_text()
    assert not re.search(r"^\s*--(index-url|extra-index-url|find-links|trusted-host)", text, re.M)
    assert "file://" not in text
