"""The controller is judged by the schedule the beat really runs (docs/operations.md#the-controllers-interval).

The stored ``rollout/all`` task's interval, not ROLLOUT_EVERY, decides ``no_controller`` and the health's
``healthy``. ``migrate`` (and a starting beat) brings the stored interval to ROLLOUT_EVERY unless a person
changed it in the admin (a stored interval other than the one the code last wrote): theirs wins, and
``manage.py check`` says they differ (rollout.W005). With real processes: tests/integration/test_no_controller.py.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from rollout.checks import check_tick_schedule
from rollout.controller.tick import rollouts_tick_all
from rollout.dispatch import TICK_ALL_TASK
from rollout.models import ControllerBeat, TickScheduleWritten
from rollout.schedules import on_beat_init, periodic_tick_ensure, tick_every_stored
from tests.factories import fleet, rollout_settings

pytestmark = pytest.mark.django_db

HEALTH = "/api/compute/health"


def stored() -> int:
    task = PeriodicTask.objects.select_related("interval").get(name=TICK_ALL_TASK)
    return task.interval.every


def admin_sets(every: int, period: str = IntervalSchedule.SECONDS) -> None:
    """What the admin's form does: the task points at another interval."""
    task = PeriodicTask.objects.get(name=TICK_ALL_TASK)
    task.interval = IntervalSchedule.objects.create(every=every, period=period)
    task.save()


def healthy_after(api, seconds: float) -> bool:
    """Is the controller healthy ``seconds`` after the last periodic tick?"""
    last = ControllerBeat.objects.get().last_tick_at
    with time_machine.travel(last + timedelta(seconds=seconds), tick=False):
        return api.get(HEALTH).json()["controller"]["healthy"]


def test_health_is_judged_by_the_stored_interval_not_the_environment(anonymous_api, settings):
    periodic_tick_ensure(every=30, reset=True)
    settings.ROLLOUT = rollout_settings(every=5)  # the environment says 5 s; the beat runs every 30 s
    rollouts_tick_all()
    assert healthy_after(anonymous_api, 89) is True  # 3 x 30 s, not 3 x 5 s
    assert healthy_after(anonymous_api, 91) is False
    admin_sets(2, IntervalSchedule.MINUTES)  # edited in the admin: 2 minutes
    assert tick_every_stored() == 120
    assert healthy_after(anonymous_api, 359) is True
    assert healthy_after(anonymous_api, 361) is False


def test_no_controller_is_judged_by_the_stored_interval(api, tenant, releases, settings):
    periodic_tick_ensure(every=60, reset=True)
    settings.ROLLOUT = rollout_settings(every=1)
    fleet(tenant, {"a": (3, "1")})
    created = api.post("/api/compute/rollouts/", {"version": "1.0.0", "waves": [100]}, format="json").json()
    with time_machine.travel(timezone.now() + timedelta(seconds=179), tick=False):
        assert (api.get(f"/api/compute/rollouts/{created['id']}/").json()["blocker"] or {}).get("code") != (
            "no_controller"
        )
    with time_machine.travel(timezone.now() + timedelta(seconds=181), tick=False):
        assert api.get(f"/api/compute/rollouts/{created['id']}/").json()["blocker"]["code"] == "no_controller"


def test_a_page_of_rows_reads_the_stored_interval_once(api, tenant, releases):
    periodic_tick_ensure(every=30, reset=True)
    fleet(tenant, {"a": (20, "0.1")})
    created = api.post("/api/compute/rollouts/", {"version": "1.0.0", "waves": [100]}, format="json").json()
    with (
        time_machine.travel(timezone.now() + timedelta(seconds=91), tick=False),
        CaptureQueriesContext(connection) as queries,
    ):
        rows = api.get(f"/api/compute/rollouts/{created['id']}/nodes/").json()["results"]
    assert len(rows) == 20
    assert {row["blocker"]["code"] for row in rows} == {"no_controller"}
    reads = [q["sql"] for q in queries.captured_queries if "django_celery_beat_periodictask" in q["sql"]]
    assert len(reads) == 1, reads


def test_migrate_brings_the_code_s_interval_to_the_environment(settings):
    periodic_tick_ensure(every=30, reset=True)
    settings.ROLLOUT = rollout_settings(every=5)
    call_command("migrate", verbosity=0)
    assert stored() == 5
    assert TickScheduleWritten.objects.get().every == 5
    assert PeriodicTask.objects.get(name=TICK_ALL_TASK).expire_seconds == 4
    assert check_tick_schedule() == []


def test_an_interval_changed_in_the_admin_wins_over_migrate_and_the_check_says_so(settings):
    periodic_tick_ensure(every=30, reset=True)
    admin_sets(10)
    settings.ROLLOUT = rollout_settings(every=5)
    call_command("migrate", verbosity=0)
    on_beat_init()  # a starting beat: the same rule
    assert stored() == 10
    assert TickScheduleWritten.objects.get().every == 30  # still the code's last write, not the person's
    [warning] = check_tick_schedule()
    assert warning.id == "rollout.W005"
    assert "every 10 s" in warning.msg
    settings.ROLLOUT = rollout_settings(every=10)  # the environment agrees: no warning, nothing to write
    assert check_tick_schedule() == []
    periodic_tick_ensure()
    assert (stored(), TickScheduleWritten.objects.get().every) == (10, 10)
    settings.ROLLOUT = rollout_settings(every=7)
    periodic_tick_ensure(reset=True)  # setup_periodic_tasks --reset: the configuration is written
    assert stored() == 7


def test_a_starting_beat_brings_the_code_s_interval_to_the_environment(settings):
    periodic_tick_ensure(every=30, reset=True)
    settings.ROLLOUT = rollout_settings(every=3)
    on_beat_init()
    assert stored() == 3


def test_an_installation_migrated_before_the_record_takes_the_environment(settings):
    periodic_tick_ensure(every=30, reset=True)
    TickScheduleWritten.objects.all().delete()
    settings.ROLLOUT = rollout_settings(every=5)
    periodic_tick_ensure()
    assert (stored(), TickScheduleWritten.objects.get().every) == (5, 5)
