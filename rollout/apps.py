from django.apps import AppConfig


class RolloutConfig(AppConfig):
    name = "rollout"
    verbose_name = "Rollout"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from rollout import checks  # noqa: F401  (registers the system checks)
