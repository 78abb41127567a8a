from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from core.errors import DomainError
from fleet.models import Permission, Scope, Tenant
from fleet.services.apikeys import lifetime_parse
from fleet.services.audit import Actor
from fleet.services.iam import api_key_create


class Command(BaseCommand):
    help = (
        "Create an API key for a user of a tenant (the user is created if needed): every scope unless --scope "
        "is given, no expiry unless --expires-in is. The key is the last line."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--user", required=True, help="username")
        parser.add_argument("--name", default="", help="what the key is for (a pipeline, a person)")
        parser.add_argument(
            "--grant",
            action="append",
            default=[],
            choices=Permission.values,
            help="grant this permission on the tenant's fleet scope (repeatable)",
        )
        parser.add_argument(
            "--scope",
            action="append",
            default=None,
            help=f"a scope of the key (repeatable; {', '.join(Scope.values)}); every scope when none is given",
        )
        parser.add_argument("--expires-in", default=None, help="the key expires after this long: 30d, 12h, 90m")

    def handle(self, *args, tenant: str, user: str, name: str, grant: list[str], **options):
        scopes: list[str] | None = options["scope"]
        unknown = sorted(set(scopes or []) - set(Scope.values))
        if unknown:
            raise CommandError(f"Unknown scope {unknown[0]!r}: the scopes are {', '.join(Scope.values)}.")
        expires_at = None
        if options["expires_in"] is not None:
            try:
                expires_at = timezone.now() + lifetime_parse(options["expires_in"])
            except ValueError as exc:
                raise CommandError(f"--expires-in: {exc}.") from exc
        if len(name) > 100:
            raise CommandError("--name: at most 100 characters.")
        tenant_row = Tenant.objects.filter(slug=tenant).first()
        if tenant_row is None:
            raise CommandError(f"No tenant {tenant!r}; create it with 'manage.py createtenant {tenant}'.")
        try:
            api_key, plain = api_key_create(
                tenant=tenant_row,
                username=user,
                grants=grant,
                scopes=scopes,
                expires_at=expires_at,
                name=name,
                actor=Actor.command(),
            )
        except DomainError as exc:
            raise CommandError(exc.detail) from exc
        granted = ", ".join(grant) or "no grants"
        until = f"expires {expires_at.isoformat()}" if expires_at is not None else "no expiry"
        self.stdout.write(
            f"API key {api_key.prefix}… for {user} in {tenant} ({granted}; scopes {', '.join(api_key.scopes)}; "
            f"{until}). Shown once:"
        )
        self.stdout.write(plain)
