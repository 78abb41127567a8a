import pytest

from tests.factories import manifest, release_stored
from tests.rollout.conftest import module_settings  # noqa: F401 (the same settings as the rollout tests, autouse)


@pytest.fixture
def releases(db):
    """0.9.0 (sequence 1, what the fleet runs), 1.0.0 (sequence 2, the bad one) and 1.0.1 (sequence 3, the fix)."""
    return (
        release_stored(manifest("0.9.0", 1)),
        release_stored(manifest("1.0.0", 2, archs=("amd64",))),
        release_stored(manifest("1.0.1", 3, archs=("amd64",))),
    )
