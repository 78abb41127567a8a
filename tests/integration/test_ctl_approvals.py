"""``python -m rollout.ctl`` with four eyes, end to end: ``approve`` and ``deny`` against the live server, a
Celery worker and beat, and simulated agents; ``wait`` waits through ``awaiting_approval``."""

from __future__ import annotations

import json
import re

import pytest

from fleet.models import Permission
from fleet.services.iam import api_key_create, tenant_set_rollout_approvals
from simulator import Fleet, build_agent_configs
from tests.factories import pin
from tests.integration.test_ctl_end_to_end import ctl, key_of

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_a_rollout_waits_for_its_approval_then_completes_and_a_denied_one_makes_wait_exit_3(stack, tenant):
    tenant_set_rollout_approvals(tenant=tenant, approvals=1)
    _, approver = api_key_create(tenant=tenant, username="reviewer", grants=[Permission.ROLLOUT_APPROVE])
    # The creator may approve too, but never their own rollout.
    api_key_create(tenant=tenant, username="e2e", grants=[Permission.ROLLOUT_APPROVE])
    stack.register("0.9.0", 1)
    stack.register("1.0.0", 2)
    stack.register("1.1.0", 3)
    enrolled = stack.enroll({"p": (2, 0.5)})
    creator = key_of(stack)
    agents = build_agent_configs(enrolled["p"], daemon_version="0.9.0")
    fleet = Fleet(stack.url, agents, release_pins=[pin(0)], heartbeat_seconds=0.5, restart_delay=0.2, seed=6)
    with fleet.start_thread(timeout=300) as running:
        assert running.wait_for(lambda f: f.online_count() == 2, timeout=30)
        created = ctl(stack.url, creator, "--output", "json", "create", "1.0.0", "--soak", "0", "--timeout", "30")
        assert created.returncode == 0, created.stderr
        rollout = json.loads(created.stdout)
        assert (rollout["state"], rollout["createdBy"], rollout["approvalsRequired"]) == ("awaiting_approval", "e2e", 1)
        rid = rollout["id"]

        # Awaiting approval is no outcome: wait keeps waiting (here, until its timeout).
        assert ctl(stack.url, creator, "wait", rid, "--timeout", "1", "--interval", "0.2").returncode == 4
        own = ctl(stack.url, creator, "approve", rid)
        assert own.returncode == 1
        assert own.stderr.startswith("error: self_approval: ")
        approved = ctl(stack.url, approver, "approve", rid, "--comment", "looks good")
        assert approved.returncode == 0, approved.stderr
        assert approved.stdout.startswith(f"{rid} active")
        status = ctl(stack.url, creator, "status", rid)
        assert re.search(r"^approvals +1 of 1: reviewer *$", status.stdout, re.MULTILINE), status.stdout
        assert re.search(r"^created by +e2e *$", status.stdout, re.MULTILINE), status.stdout
        done = ctl(stack.url, creator, "wait", rid, "--interval", "0.2", "--timeout", "90")
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert running.wait_for(lambda f: f.versions().get("1.0.0") == 2, timeout=30)

    second = ctl(stack.url, creator, "--output", "json", "create", "1.1.0")
    assert second.returncode == 0, second.stderr
    rid = json.loads(second.stdout)["id"]
    no_comment = ctl(stack.url, approver, "deny", rid)  # the server requires a comment to deny: its code
    assert no_comment.returncode == 1
    assert "invalid_input: comment" in no_comment.stderr
    denied = ctl(stack.url, approver, "deny", rid, "--comment", "not on a Friday")
    assert denied.returncode == 0, denied.stderr
    assert denied.stdout.startswith(f"{rid} denied")
    assert ctl(stack.url, creator, "wait", rid).returncode == 3
    assert ctl(stack.url, creator, "status", rid, "--watch", "--interval", "0.2").returncode == 3
    # Who denied it and why; its nodes were cancelled, never settled (not "2/2 settled").
    shown = ctl(stack.url, creator, "status", rid)
    assert re.search(r"^denied by +api:reviewer at \S+ *$", shown.stdout, re.MULTILINE), shown.stdout
    assert re.search(r"^comment +not on a Friday *$", shown.stdout, re.MULTILINE), shown.stdout
    cancelled = sum(
        w["cancelled"] for w in json.loads(ctl(stack.url, creator, "--output", "json", "status", rid).stdout)["waves"]
    )
    assert cancelled == 2
    assert " 0/2 " in shown.stdout, shown.stdout  # the whole rollout: none settled
    assert "2/2" not in shown.stdout, shown.stdout

    third = json.loads(ctl(stack.url, creator, "--output", "json", "create", "1.1.0").stdout)["id"]
    assert ctl(stack.url, creator, "abort", third).returncode == 0
    shown = ctl(stack.url, creator, "status", third)
    assert re.search(r"^aborted by +api:e2e at \S+ *$", shown.stdout, re.MULTILINE), shown.stdout
    assert re.search(r"^why +an operator's abort *$", shown.stdout, re.MULTILINE), shown.stdout
    assert ctl(stack.url, creator, "wait", third).returncode == 3
