import pytest

from tests.factories import rollout_settings


@pytest.fixture(autouse=True)
def release_settings(settings, tmp_path):
    settings.ROLLOUT = rollout_settings()
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings
