import pytest

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
