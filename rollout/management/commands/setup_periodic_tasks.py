from django.core.management.base import BaseCommand

from rollout.schedules import periodic_gates_ensure, periodic_tick_ensure, periodic_webhooks_ensure


class Command(BaseCommand):
    help = (
        "Create the rollout/all, rollout/webhooks-due and rollout/gates-due periodic tasks (runs after every "
        "migrate too); --reset applies ROLLOUT['every']."
    )

    def add_arguments(self, parser):
        parser.add_argument("--reset", action="store_true", help="overwrite an interval edited in the admin")

    def handle(self, *args, reset: bool, **options):
        task = periodic_tick_ensure(reset=reset)
        self.stdout.write(f"{task.name}: every {task.interval.every} {task.interval.period}")
        sweep = periodic_webhooks_ensure()
        self.stdout.write(f"{sweep.name}: every {sweep.interval.every} {sweep.interval.period}")
        gates = periodic_gates_ensure()
        self.stdout.write(f"{gates.name}: every {gates.interval.every} {gates.interval.period}")
