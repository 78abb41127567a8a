import pytest
from django.db import transaction
from django.utils import timezone

from rollout import dispatch
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
    """Every task the controller publishes after commit: (name, args, eta), nothing sent to a broker.

    Tests run in a transaction that never commits: the on-commit publishes run here as a commit would.
    """
    sent: list[tuple[str, list, object]] = []
    monkeypatch.setattr(transaction, "on_commit", lambda callback, using=None, robust=False: callback())

    def record(name, *, args, eta=None, countdown=None):
        if eta is not None and eta - timezone.now() > dispatch.max_delay():
            return False  # the rule under test: never scheduled (recorded by its absence)
        sent.append((name, args, eta))
        return True

    monkeypatch.setattr(dispatch, "publish", record)
    return sent
