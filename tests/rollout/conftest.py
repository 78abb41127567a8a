import pytest

from rollout.services.releases import release_register
from tests.factories import manifest, rollout_settings, signed


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
    old = release_register(envelope=signed(manifest("0.9.0", 1))).release
    new = release_register(envelope=signed(manifest("1.0.0", 2, archs=("amd64",)))).release
    return old, new
