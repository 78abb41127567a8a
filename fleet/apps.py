from django.apps import AppConfig


class FleetConfig(AppConfig):
    name = "fleet"
    label = "fleet"
    verbose_name = "Fleet"

    def ready(self) -> None:
        from core.metrics import register_collector
        from fleet import checks  # noqa: F401  (checks register themselves)
        from fleet.metrics import PoolCollector, PulseCollector
        from fleet.sso import checks as sso_checks  # noqa: F401

        register_collector(PoolCollector())
        register_collector(PulseCollector())
