"""The README's walk-throughs work when pasted, in order, into one shell: the first rollout completes."""

import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from demo.processes import free_port

README = Path(__file__).resolve().parents[2] / "README.md"
# The sections a newcomer pastes from, in the README's order: every sh block of each, in order.
WALK_THROUGH = (
    "## Sign and register a release, end to end",
    "## Point 100 simulated agents at the server",
    "## Operate a rollout",
)

pytestmark = pytest.mark.integration


def shell_blocks(heading: str) -> list[str]:
    """Every sh block of the README's section under ``heading`` (up to the next section), in order."""
    text = README.read_text()
    section = text[text.index(heading) + len(heading) :]
    section = section[: section.index("\n## ")] if "\n## " in section else section
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    assert blocks, f"no sh block under {heading!r}"
    return blocks


def test_the_sections_are_in_the_order_a_newcomer_runs_them():
    text = README.read_text()
    assert [text.index(heading) for heading in WALK_THROUGH] == sorted(text.index(h) for h in WALK_THROUGH)
    # The controller starts with the server, in the first section: before any rollout exists (a rollout
    # never moves without it), and the agents run in the background while the rollouts below move.
    first = "\n".join(shell_blocks(WALK_THROUGH[0]))
    assert "celery -A project worker" in first
    assert "celery -A project beat" in first
    assert "rollouts/" not in first
    assert shell_blocks(WALK_THROUGH[1])[0].rstrip().splitlines()[-1] == 'tail -1 "$WORK/agents.log"'


def test_the_walk_throughs_run_in_order_and_the_first_rollout_completes(tmp_path):
    port = str(free_port())
    blocks = [block for heading in WALK_THROUGH for block in shell_blocks(heading)]
    # A database of this run's own (parallel runs share the PostgreSQL server), dropped at the end.
    database = f"rollout_walkthrough_{uuid.uuid4().hex[:8]}"
    script = "\n".join(blocks).replace("8000", port).replace("rollout_walkthrough", database)
    cleanup = (
        "kill ${AGENTS:-} ${SERVER:-} ${WORKER:-} ${BEAT:-} 2>/dev/null || true; "
        "wait ${AGENTS:-} ${WORKER:-} ${BEAT:-} 2>/dev/null || true; dropdb"
    )
    cleanup = f"{cleanup} -h 127.0.0.1 -U postgres --force --if-exists {database}"
    script = f"set -euo pipefail\ntrap '{cleanup}' EXIT\n{script}"
    # The README's commands with the defaults' pace shortened: heartbeats and ticks every 2 s, not 10 and 30.
    env = {**os.environ, "FLEET_HEARTBEAT_SECONDS": "2", "ROLLOUT_EVERY": "2"}
    done = subprocess.run(
        ["bash", "-c", script], cwd=README.parent, capture_output=True, text=True, timeout=600, check=False, env=env
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    out = done.stdout
    # Sign and register: 201, then 200 for the same envelope; the health check answers without a key.
    assert '"version":"1.0.0","sequence":1' in out  # registered and listed
    assert re.search(r"\} 201\n200\n", out), out[:2000]
    assert '{"database":"ok","broker":"ok","controller":{"lastTickAt":' in out
    digests = set(re.findall(r"\b[0-9a-f]{64}\b", out))
    assert len(digests) == 1, digests  # manifest, stored and downloaded bytes agree
    # The first rollout, from the command line: planned, created, completed; a completed one is not paused.
    assert "dry run: 100 nodes to bcd 1.0.0" in out, out
    assert "exit 0: completed" in out, out
    assert re.search(r"^state +completed\s*$", out, re.MULTILINE), out
    assert "error: invalid_state: A completed rollout cannot be paused." in done.stderr
    assert "exit 1" in out
    # The second, from the API: each change with its status code.
    assert '"estimatedSeconds"' in out  # the dry run
    assert '{"results":[{"kind":"rollout.created"' in out  # a list is a page
    assert re.search(r'\{"results":\[\{"nodeId":"[^"]+","poolId":"[^"]+","wave":2,', out)  # the next page, filter kept
    for state in ("paused", "active", "aborted"):
        assert re.search(rf'"state":"{state}".*\}} 200$', out, re.MULTILINE), state
    # Four eyes: the approver's approval starts the rollout.
    assert '"rolloutApprovals":1' in out
