"""`manage.py usage_rebuild [--model NAME] [--keep-costs]`: recompute the daily usage sums
from the ledger, repricing each record at the price of its day first (unless --keep-costs)."""

from django.core.management.base import BaseCommand

from usage.services import usage_rebuild


class Command(BaseCommand):
    help = "Recompute every table of daily usage sums from the usage ledger, repricing it."

    def add_arguments(self, parser):
        parser.add_argument("--model", help="only this model's records and sums")
        parser.add_argument(
            "--keep-costs",
            action="store_true",
            help="sum the recorded costs as they are, without repricing",
        )

    def handle(self, *args, model=None, keep_costs=False, **options):
        rows = usage_rebuild(model=model, reprice=not keep_costs)
        self.stdout.write(f"{rows} daily usage rows rebuilt")
