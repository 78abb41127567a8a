from django.apps import AppConfig


class FleetConfig(AppConfig):
    name = "project.fleet"
    label = "fleet"
    verbose_name = "Fleet"
