"""Benchmark: the budget check's cost per turn.

    .venv/bin/python bench/budget_bench.py [--people 200] [--chats 1000] [--days 365]
        [--rows-per-day 2000] [--runs 500] [--database-url postgres://…]

On a throw-away database: `--people` people, `--chats` web rooms and `--days` days of
daily usage sums (`--rows-per-day` rows a day, each a person, a chat and one of two models;
the sums the usage ledger keeps, inserted directly, and the hub's sums per day, model and
kind derived from them). Budgets: the per-person default, an
override for the measured person, a cap for the measured chat and one for the hub, so the
check reads all three (the worst case: one query for the budgets, three aggregates). Then
`budget_check` for that person in that chat, and the whole turn gate (the trigger's
attribution included) for a turn there, and each of the three aggregates alone, each
`--runs` times; p50 and p95 in ms. Prints Markdown tables and the machine.
"""

import argparse
import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402

BATCH = 10_000
HUB_SUMMED = ("calls", "prompt_tokens", "completion_tokens", "cost_nanos", "unpriced_calls",
              "unpriced_tokens", "duration_ms")  # fmt: skip


def seed(people: int, chats: int, days: int, per_day: int) -> dict:
    from django.contrib.auth import get_user_model
    from django.db.models import Sum

    from chats.models import Chat
    from usage.models import UsageDay, UsageHubDay, day_slot

    rng = random.Random(25)
    User = get_user_model()
    User.objects.bulk_create([User(username=f"p{n}", is_staff=n == 0) for n in range(people)])
    person_ids = list(User.objects.order_by("id").values_list("id", flat=True))
    Chat.objects.bulk_create(
        [
            Chat(chat_key=f"web:r{n}", channel="web", external_id=f"r{n}", kind="group")
            for n in range(chats)
        ]
    )
    chat_ids = list(Chat.objects.order_by("id").values_list("id", flat=True))
    today = datetime.now(UTC).date()
    rows, seen = [], set()
    for offset in range(days):
        day = today - timedelta(days=offset)
        for _ in range(per_day):
            person, chat = rng.choice(person_ids), rng.choice(chat_ids)
            model = rng.choice(("big-model", "small-model"))
            slot = day_slot(day, person, chat, model, "turn")
            if slot in seen:
                continue
            seen.add(slot)
            tokens = rng.randint(100, 5000)
            rows.append(
                UsageDay(slot=slot, day=day, person_id=person, chat_id=chat, model=model,
                         kind="turn", calls=1, prompt_tokens=tokens, completion_tokens=tokens // 5,
                         cost_nanos=tokens * 1000)
            )  # fmt: skip
            if len(rows) >= BATCH:
                UsageDay.objects.bulk_create(rows)
                rows = []
    UsageDay.objects.bulk_create(rows)
    # The hub's sums per (day, model, kind), as recording keeps them beside the daily rows.
    hub = (
        UsageDay.objects.values("day", "model", "kind")
        .annotate(**{name: Sum(name) for name in HUB_SUMMED})
        .order_by()
    )
    UsageHubDay.objects.bulk_create([UsageHubDay(**row) for row in hub], batch_size=BATCH)
    return {"staff": person_ids[0], "person": person_ids[1], "chat": chat_ids[1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--people", type=int, default=200)
    parser.add_argument("--chats", type=int, default=1000)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--rows-per-day", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    with common.temporary_database(args.database_url, label="budget") as url:
        common.setup_django(url)
        common.migrate()
        from decimal import Decimal

        from django.contrib.auth import get_user_model
        from django.utils import timezone

        from budgets.models import Budget, Scope
        from budgets.selectors import budget_check
        from budgets.services import budget_turn_gate
        from chats.agent.registry import TurnContext, TurnSpend
        from chats.services import message_ingest
        from usage.models import UsageDay

        ids = seed(args.people, args.chats, args.days, args.rows_per_day)
        User = get_user_model()
        staff, person = User.objects.get(pk=ids["staff"]), User.objects.get(pk=ids["person"])
        huge = 10**15  # never reached: every cap is read and compared
        Budget.objects.bulk_create(
            [
                Budget(scope=Scope.PERSON, monthly_tokens=huge, set_by=staff),
                Budget(scope=Scope.PERSON, person=person, monthly_cost=Decimal(10**9),
                       set_by=staff),
                Budget(scope=Scope.CHAT, chat_id=ids["chat"], monthly_tokens=huge, set_by=staff),
                Budget(scope=Scope.HUB, monthly_tokens=huge, set_by=staff),
            ]
        )  # fmt: skip
        trigger = message_ingest(
            channel="web", chat_id="r1", user_id=str(person.pk), user_name="p1", text="hi",
            person=person,
        ).message  # fmt: skip
        context = TurnContext(chat=trigger.chat, trigger=trigger, person=person)
        pending = TurnSpend(model="big-model", prompt_tokens=1200, completion_tokens=300)

        def check():
            assert budget_check(person.pk, ids["chat"], now=timezone.now()) is None

        def gate():
            assert budget_turn_gate(context, pending) is None

        from budgets.selectors import month_bounds
        from usage.selectors import spend

        start, end = month_bounds(timezone.now())
        cases = (
            ("spend(): the person's month", lambda: spend(start=start, end=end,
                                                          person_id=person.pk)),
            ("spend(): the chat's month", lambda: spend(start=start, end=end,
                                                        chat_id=ids["chat"])),
            ("spend(): the hub's month", lambda: spend(start=start, end=end)),
            ("budget_check (3 caps)", check),
            ("turn gate", gate),
        )  # fmt: skip
        rows = []
        for name, function in cases:
            times = common.timings_ms(function, runs=args.runs, warmup=5)
            rows.append(
                [name, f"{common.median(times):.3f}", f"{common.percentile(times, 95):.3f}"]
            )
        print(f"database: {common.database_description()}")
        print(f"daily rows: {UsageDay.objects.count():,} over {args.days} days\n")
        print(common.markdown_table(["what", "p50 ms", "p95 ms"], rows))
        print()
        print(common.markdown_table(["", ""], list(common.machine_info().items())))


if __name__ == "__main__":
    main()
