"""The README's walk-throughs work when pasted into a shell."""

import re
import socket
import subprocess
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"

pytestmark = pytest.mark.integration


def shell_block(heading: str) -> str:
    text = README.read_text()
    section = text[text.index(heading) :]
    match = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert match, f"no sh block under {heading!r}"
    return match.group(1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_signing_walk_through_registers_and_serves_a_release(tmp_path):
    port = str(free_port())
    script = shell_block("## Sign and register a release, end to end").replace("8000", port)
    script = f"set -euo pipefail\ntrap 'kill $SERVER 2>/dev/null || true' EXIT\n{script}"
    done = subprocess.run(
        ["bash", "-c", script], cwd=README.parent, capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert '"version":"1.0.0","sequence":1' in out  # registered (201) and listed
    digests = re.findall(r"\b[0-9a-f]{64}\b", out)
    assert len(set(digests)) == 1, digests  # manifest, stored and downloaded bytes agree
