from django.core.management.base import BaseCommand, CommandError

from core.errors import DomainError
from fleet.models import Tenant
from fleet.models.iam import MAX_ROLLOUT_APPROVALS
from fleet.services.audit import Actor
from fleet.services.iam import tenant_set_rollout_approvals


class Command(BaseCommand):
    help = "Change a tenant's settings (audited). The tenant's own API keys can never change them."

    def add_arguments(self, parser):
        parser.add_argument("slug", help="tenant slug")
        parser.add_argument(
            "--rollout-approvals",
            type=int,
            metavar="N",
            help=f"approvals (0 to {MAX_ROLLOUT_APPROVALS}) each new rollout needs from users other than its "
            "creator before it starts",
        )

    def handle(self, *args, slug: str, rollout_approvals: int | None, **options):
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None:
            raise CommandError(f"No tenant {slug!r}; create it with 'manage.py createtenant {slug}'.")
        if rollout_approvals is None:
            raise CommandError("Nothing to change: give --rollout-approvals N.")
        try:
            tenant = tenant_set_rollout_approvals(tenant=tenant, approvals=rollout_approvals, actor=Actor.command())
        except DomainError as exc:
            raise CommandError(exc.detail) from exc
        self.stdout.write(f"Tenant {tenant.slug}: rollouts need {tenant.rollout_approvals} approval(s).")
