"""``python -m rollout.ctl`` with schedules, end to end: ``create --start-at/--end-by``, ``start``, and
``resume --end-by`` after a deadline, against the live server, a Celery worker and beat, and simulated agents."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from demo.processes import wait_until
from rollout.models import Rollout
from simulator import Fleet, build_agent_configs
from tests.factories import pin
from tests.integration.test_ctl_end_to_end import ctl, key_of

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def rfc3339(delta: timedelta) -> str:
    return (timezone.now() + delta).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_scheduled_rollout_starts_on_start_and_one_past_its_deadline_resumes_with_a_new_one(stack):
    stack.register("0.9.0", 1)
    stack.register("1.0.0", 2)
    stack.register("1.1.0", 3)
    enrolled = stack.enroll({"p": (2, 0.5)})
    key = key_of(stack)
    agents = build_agent_configs(enrolled["p"], daemon_version="0.9.0")
    fleet = Fleet(stack.url, agents, release_pins=[pin(0)], heartbeat_seconds=0.5, restart_delay=0.2, seed=8)
    with fleet.start_thread(timeout=300) as running:
        assert running.wait_for(lambda f: f.online_count() == 2, timeout=30)
        past = ctl(stack.url, key, "create", "1.0.0", "--end-by", rfc3339(-timedelta(hours=1)))
        assert past.returncode == 1
        assert past.stderr.startswith("error: invalid_schedule: ")

        created = ctl(
            stack.url, key, "--output", "json", "create", "1.0.0", "--start-at", rfc3339(timedelta(hours=1)),
            "--soak", "0", "--timeout", "30",
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        rollout = json.loads(created.stdout)
        assert rollout["state"] == "scheduled"
        rid = rollout["id"]
        assert ctl(stack.url, key, "wait", rid, "--timeout", "0").returncode == 4  # scheduled is no outcome
        started = ctl(stack.url, key, "start", rid)
        assert started.returncode == 0, started.stderr
        assert started.stdout.startswith(f"{rid} active")
        assert ctl(stack.url, key, "wait", rid, "--interval", "0.2", "--timeout", "90").returncode == 0
        again = ctl(stack.url, key, "start", rid)
        assert again.returncode == 1
        assert again.stderr.startswith("error: invalid_state: ")

        # A deadline a few seconds ahead, a soak of an hour: wave 0 settles, the deadline pauses it.
        late = ctl(
            stack.url, key, "--output", "json", "create", "1.1.0", "--waves", "50,100", "--soak", "3600",
            "--timeout", "30", "--end-by", rfc3339(timedelta(seconds=8)),
        )  # fmt: skip
        assert late.returncode == 0, late.stderr
        rid = json.loads(late.stdout)["id"]
        paused = ctl(stack.url, key, "wait", rid, "--interval", "0.2", "--timeout", "60")
        assert paused.returncode == 2, (paused.stdout, paused.stderr)
        assert paused.stdout.rstrip().endswith("(deadline)")
        refused = ctl(stack.url, key, "resume", rid)
        assert refused.returncode == 1
        assert refused.stderr.startswith("error: deadline_passed: ")
        resumed = ctl(stack.url, key, "resume", rid, "--end-by", rfc3339(timedelta(hours=1)))
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.startswith(f"{rid} active")
        wait_until(lambda: Rollout.objects.get(pk=rid).next_wave_at is not None, timeout=30, what="the soak")
        assert ctl(stack.url, key, "promote", rid).returncode == 0
        assert ctl(stack.url, key, "wait", rid, "--interval", "0.2", "--timeout", "90").returncode == 0
        assert running.wait_for(lambda f: f.versions().get("1.1.0") == 2, timeout=30)
