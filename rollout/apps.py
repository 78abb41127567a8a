from django.apps import AppConfig
from django.db.models.signals import post_migrate


class RolloutConfig(AppConfig):
    name = "rollout"
    verbose_name = "Rollout"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from core.metrics import register_collector

        # tasks: register the shared tasks in every process, not only in workers (Celery's autodiscovery
        # runs at worker start): the web publishes by name (rollout/dispatch.py) and got NotRegistered.
        from rollout import checks, hooks, schedules, tasks  # noqa: F401  (checks register themselves)
        from rollout.controller.decisions import ROLLOUT_CODES
        from rollout.metrics import RolloutCollector, WebhookCollector
        from rollout.registry import delivery_checks  # noqa: F401
        from rollout.rollouts.blockers import rollout_blockers

        hooks.connect()
        register_collector(RolloutCollector(blockers=rollout_blockers, codes=ROLLOUT_CODES))
        register_collector(WebhookCollector())
        post_migrate.connect(schedules.on_post_migrate, sender=self, dispatch_uid="rollout.periodic_tick")
