import pytest
from celery import Task
from django.db import transaction

from tests.factories import manifest, release_stored, rollout_settings


@pytest.fixture(autouse=True)
def module_settings(settings, tmp_path):
    settings.ROLLOUT = rollout_settings()
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.FLEET_MIN_PROTOCOL_VERSION = 2
    settings.FLEET_HEARTBEAT_SECONDS = 10
    return settings


@pytest.fixture
def releases(db):
    """0.9.0 (sequence 1, what the fleet runs) and 1.0.0 (sequence 2, amd64 only)."""
    old = release_stored(manifest("0.9.0", 1))
    new = release_stored(manifest("1.0.0", 2, archs=("amd64",)))
    return old, new


@pytest.fixture
def published(monkeypatch, django_capture_on_commit_callbacks):
    """Every task the controller publishes after commit: (name, args, eta), as it reaches the broker's client.

    The real ``dispatch.publish`` runs, its horizon check included (tests/integration/test_dispatch.py holds it on
    the real brokers); only Celery's ``apply_async``, the one call that would send the message, records it instead.
    Tests run in a transaction that never commits: the on-commit publishes run here as a commit would.
    """
    sent: list[tuple[str, list, object]] = []
    monkeypatch.setattr(transaction, "on_commit", lambda callback, using=None, robust=False: callback())

    def record(task, args=None, kwargs=None, **options):
        sent.append((task.name, list(args or ()), options.get("eta")))

    monkeypatch.setattr(Task, "apply_async", record)
    return sent
