"""``manage.py audit verify [--tenant SLUG]``: recompute the audit hash chains (docs/api.md#the-audit-trail)."""

from django.core.management.base import BaseCommand, CommandError

from fleet.models import Tenant
from fleet.services.audit import audit_verify


class Command(BaseCommand):
    help = "Audit trail tools. 'audit verify [--tenant SLUG]' exits 0 when every chain is intact, else 1."

    def add_arguments(self, parser):
        verbs = parser.add_subparsers(dest="verb", required=True)
        verify = verbs.add_parser("verify", help="Recompute every entry's hash and check the chain links.")
        verify.add_argument("--tenant", help="only this tenant's chain (default: every tenant's and the system's)")

    def handle(self, *args, verb: str, **options):
        if verb == "verify":
            self._verify(options.get("tenant"))

    def _verify(self, slug: str | None) -> None:
        tenant = None
        if slug is not None:
            tenant = Tenant.objects.filter(slug=slug).first()
            if tenant is None:
                raise CommandError(f"No tenant {slug!r}.")
        found = audit_verify(tenant=tenant)
        if found is not None:
            # CommandError exits 1 with the message on stderr.
            raise CommandError(f"Audit chain broken: {found}.", returncode=1)
        self.stdout.write(f"Audit chain{'s' if tenant is None else ''} intact.")
