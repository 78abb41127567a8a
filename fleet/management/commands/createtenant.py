from django.core.management.base import BaseCommand, CommandError

from core.errors import DomainError
from fleet.services.iam import tenant_create


class Command(BaseCommand):
    help = "Create a tenant."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--name", default="")

    def handle(self, *args, slug: str, name: str, **options):
        try:
            tenant = tenant_create(slug=slug, name=name)
        except DomainError as exc:
            raise CommandError(exc.detail) from exc
        except Exception as exc:  # full_clean's ValidationError
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"Created tenant {tenant.slug}")
