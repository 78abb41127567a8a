"""The Celery application. Tasks are discovered in every installed app's tasks.py."""

import os

from celery import Celery
from celery.signals import worker_process_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

# The broker connection class that keeps a worker running through a broker outage: project/broker.py.
app = Celery("project", amqp="project.broker:BrokerAMQP")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_shutdown.connect
def _metrics_process_exited(pid: int | None = None, **kwargs) -> None:
    """prometheus-client's multiprocess mode: forget this worker process's live gauges (core/metrics.py)."""
    from core.metrics import mark_process_dead

    mark_process_dead(pid or os.getpid())
