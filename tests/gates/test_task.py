"""The evaluation is a beat-scheduled Celery task, thin over the service (docs/controller.md#gates)."""

from __future__ import annotations

import pytest
from celery import current_app
from django.core.management import call_command
from django_celery_beat.models import PeriodicTask

from rollout.dispatch import GATES_DUE_TASK
from rollout.models import RolloutGate
from tests.factories import fleet
from tests.gates.conftest import vector
from tests.gates.test_evaluate import create, prom

pytestmark = pytest.mark.django_db


def test_the_schedule_exists_every_five_seconds_expiring_before_the_next(capsys):
    call_command("setup_periodic_tasks")
    call_command("setup_periodic_tasks")  # idempotent
    task = PeriodicTask.objects.get(name=GATES_DUE_TASK)
    assert (task.task, task.interval.every, task.interval.period, task.expire_seconds) == (
        GATES_DUE_TASK,
        5,
        "seconds",
        4,
    )
    assert f"{GATES_DUE_TASK}: every 5 seconds" in capsys.readouterr().out


def test_the_task_evaluates_the_due_gates(tenant, releases, module_settings, serve):
    server = serve(body=vector("0.5"))
    module_settings.ROLLOUT_PROMETHEUS_URL = server.url
    fleet(tenant, {"a": (2, "1")})
    create(tenant, prom(), prom("second"))
    task = current_app.tasks[GATES_DUE_TASK]
    assert task.acks_late
    assert task.apply().get() == 2
    assert set(RolloutGate.objects.values_list("state", flat=True)) == {"pass"}
    assert task.apply().get() == 0  # not due again for an interval
