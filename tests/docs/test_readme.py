"""The README's walk-throughs work when pasted into a shell."""

import re
import subprocess
import uuid
from pathlib import Path

import pytest

from demo.processes import free_port

README = Path(__file__).resolve().parents[2] / "README.md"

pytestmark = pytest.mark.integration


def shell_block(heading: str) -> str:
    text = README.read_text()
    section = text[text.index(heading) :]
    match = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert match, f"no sh block under {heading!r}"
    return match.group(1)


def test_the_walk_throughs_sign_register_simulate_and_operate(tmp_path):
    """The three README blocks, pasted one after the other into one shell."""
    port = str(free_port())
    blocks = [
        shell_block("## Sign and register a release, end to end"),
        shell_block("## Point 100 simulated agents at the server").replace("--duration 20", "--duration 4"),
        shell_block("## Operate a rollout"),
    ]
    # A database of this run's own (parallel runs share the PostgreSQL server), dropped at the end.
    database = f"rollout_walkthrough_{uuid.uuid4().hex[:8]}"
    script = "\n".join(blocks).replace("8000", port).replace("rollout_walkthrough", database)
    cleanup = (
        "kill ${SERVER:-} ${WORKER:-} ${BEAT:-} 2>/dev/null || true; "
        "wait ${WORKER:-} ${BEAT:-} 2>/dev/null || true; dropdb"
    )
    cleanup = f"{cleanup} -h 127.0.0.1 -U postgres --force --if-exists {database}"
    script = f"set -euo pipefail\ntrap '{cleanup}' EXIT\n{script}"
    done = subprocess.run(
        ["bash", "-c", script], cwd=README.parent, capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert '"version":"1.0.0","sequence":1' in out  # registered and listed
    assert re.search(r"\} 201\n200\n", out), out[:2000]  # 201, then 200 for the same envelope
    assert '{"database":"ok","controller":{"lastTickAt":' in out  # the health check, without a key
    digests = set(re.findall(r"\b[0-9a-f]{64}\b", out))
    assert len(digests) == 1, digests  # manifest, stored and downloaded bytes agree
    assert '"estimatedSeconds"' in out  # the dry run
    assert '{"results":[{"kind":"rollout.created"' in out  # a list is a page
    assert re.search(r'\{"results":\[\{"nodeId":"[^"]+","poolId":"[^"]+","wave":2,', out)  # the next page, filter kept
    for state in ("paused", "active", "aborted"):
        assert f'"state":"{state}"' in out, state
