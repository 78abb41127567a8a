from django.core.management.base import BaseCommand, CommandError

from core.errors import DomainError
from fleet.models import Permission, Tenant
from fleet.services.audit import Actor
from fleet.services.iam import api_key_create


class Command(BaseCommand):
    help = "Create an API key for a user of a tenant (the user is created if needed). The key is the last line."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--user", required=True, help="username")
        parser.add_argument(
            "--grant",
            action="append",
            default=[],
            choices=Permission.values,
            help="grant this permission on the tenant's fleet scope (repeatable)",
        )

    def handle(self, *args, tenant: str, user: str, grant: list[str], **options):
        tenant_row = Tenant.objects.filter(slug=tenant).first()
        if tenant_row is None:
            raise CommandError(f"No tenant {tenant!r}; create it with 'manage.py createtenant {tenant}'.")
        try:
            api_key, plain = api_key_create(tenant=tenant_row, username=user, grants=grant, actor=Actor.command())
        except DomainError as exc:
            raise CommandError(exc.detail) from exc
        granted = ", ".join(grant) or "no grants"
        self.stdout.write(f"API key {api_key.prefix}… for {user} in {tenant} ({granted}). Shown once:")
        self.stdout.write(plain)
