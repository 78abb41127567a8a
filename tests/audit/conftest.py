from tests.rollout.conftest import module_settings, releases  # noqa: F401  (shared fixtures)
