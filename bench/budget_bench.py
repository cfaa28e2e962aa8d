"""Benchmark: the budget check's cost per turn.

    .venv/bin/python bench/budget_bench.py [--people 200] [--chats 1000] [--days 365]
        [--rows-per-day 2000] [--runs 200] [--repeats 5] [--explain] [--only TEXT]
        [--database-url postgres://…]   (without: SQLite)

On a throw-away database (a temporary SQLite file, or `hermes_budget_<pid>` created on the
PostgreSQL server and dropped at the end): `--people` people, `--chats` web rooms and
`--days` days of daily usage sums (`--rows-per-day` rows a day, each a person, a chat and
one of two models; the sums the usage ledger keeps, inserted directly, and the hub's sums
per day, model and kind derived from them), and a price for the turn's model. Budgets: the
per-person default, a money override for the measured person, a cap for the measured chat
and one for the hub, so the check reads all three scopes (the worst case).

Measured, each `--runs` times per round, `--repeats` rounds taking the cases in turn: the
three `usage.selectors.spend` aggregates alone; the check and the turn gate as they were
before the one statement ("before": the budgets through the ORM, one `spend` per cap, and
for the gate the trigger's attribution and the price, read at every check); `budget_check`;
the turn gate at the first check of a run (who spends taken from the loaded trigger; also
with the probe of the budgets table first, as when the process's last read found no
budget; with who spends read by a query, as for a trigger loaded without its actor; for a
scheduled run, whose payer its trigger names; and for one started before payers were
stored, whose schedule's owner is read) and at later checks; then, with every budget
deleted, the check and the gate again. Prints the median of the rounds' p50s, the p95 of
all runs and the queries per call, as Markdown, and the machine (with its load: the
machine may be shared). `--explain`: the statement's plan. `--only TEXT`: measure only the
rows whose name contains TEXT (e.g. "scheduled run", to compare two commits alternately).
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


def former_check(person_id, chat_id, *, now, pending_tokens=0, pending_cost_nanos=0):
    """The check as it was before the one statement (for the before/after ratio in the same
    run): the budgets through the ORM, then `usage.selectors.spend` once per cap."""
    from budgets.models import Scope
    from budgets.selectors import CapSpend, _first_used_up, applicable_budgets, month_bounds
    from usage.selectors import spend

    budgets = applicable_budgets(person_id, chat_id)
    if not budgets:
        return None
    start, end = month_bounds(now)
    caps = []
    for budget in budgets:
        if budget.scope == Scope.PERSON:
            spent = spend(start=start, end=end, person_id=person_id)
        elif budget.scope == Scope.CHAT:
            spent = spend(start=start, end=end, chat_id=chat_id)
        else:
            spent = spend(start=start, end=end)
        caps.append(
            CapSpend(budget.pk, budget.scope, budget.person_id, budget.monthly_tokens,
                     budget.monthly_cost, budget.set_by_id,
                     spent.tokens, spent.cost_nanos)
        )  # fmt: skip
    return _first_used_up(caps, pending_tokens, pending_cost_nanos or 0, end)


def former_gate(context, pending):
    """The turn gate as it was: the trigger's attribution and the price read every time."""
    from django.utils import timezone

    from usage.prices import cost_nanos
    from usage.services import attribution_of_trigger

    now = timezone.now()
    person_id = attribution_of_trigger(context.trigger.pk).person_id
    tokens = pending.prompt_tokens + pending.completion_tokens
    nanos = cost_nanos(pending.model, now.date(), pending.prompt_tokens,
                       pending.completion_tokens) if tokens else 0  # fmt: skip
    refusal = former_check(person_id, context.chat.pk, now=now, pending_tokens=tokens,
                           pending_cost_nanos=nanos)  # fmt: skip
    return refusal.message if refusal else None


def measure(cases, *, runs: int, repeats: int) -> list[list]:
    """Each case `runs` times per round, `repeats` rounds taking the cases in turn (so a
    change of the machine's load touches every case alike): the median of the rounds'
    p50s, the p95 of every run, and the queries one call makes."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    p50s = {name: [] for name, _ in cases}
    every = {name: [] for name, _ in cases}
    for _ in range(repeats):
        for name, function in cases:
            times = common.timings_ms(function, runs=runs, warmup=5)
            p50s[name].append(common.median(times))
            every[name] += times
    rows = []
    for name, function in cases:
        with CaptureQueriesContext(connection) as queries:
            function()
        rows.append([name, len(queries), f"{common.median(p50s[name]):.3f}",
                     f"{common.percentile(every[name], 95):.3f}"])  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--people", type=int, default=200)
    parser.add_argument("--chats", type=int, default=1000)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--rows-per-day", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--explain", action="store_true", help="print the check's query plan")
    parser.add_argument("--only", default="", help="measure only the rows naming this text")
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
        from chats.models import Message
        from chats.services import message_ingest
        from usage.models import ModelPrice, UsageDay

        ids = seed(args.people, args.chats, args.days, args.rows_per_day)
        User = get_user_model()
        staff, person = User.objects.get(pk=ids["staff"]), User.objects.get(pk=ids["person"])
        huge = 10**15  # never reached: every cap is read and compared
        budgets = [
            Budget(scope=Scope.PERSON, monthly_tokens=huge, set_by=staff),
            Budget(scope=Scope.PERSON, person=person, monthly_cost=Decimal(10**9), set_by=staff),
            Budget(scope=Scope.CHAT, chat_id=ids["chat"], monthly_tokens=huge, set_by=staff),
            Budget(scope=Scope.HUB, monthly_tokens=huge, set_by=staff),
        ]
        Budget.objects.bulk_create(budgets)
        ModelPrice.objects.create(model="big-model", input_per_million=Decimal("2.5"),
                                  output_per_million=Decimal("10"))  # fmt: skip
        message_ingest(
            channel="web", chat_id="r1", user_id=str(person.pk), user_name="p1", text="hi",
            person=person,
        )  # fmt: skip
        # As the turn runner loads it: the trigger with its actor and the actor's person.
        trigger = Message.objects.select_related("actor__person", "chat").get(text="hi")
        context = TurnContext(chat=trigger.chat, trigger=trigger, actor=trigger.actor,
                              person=person)  # fmt: skip
        # A trigger whose attribution takes a query (a schedule's, an API integration user's).
        by_query = Message.objects.select_related("chat").get(pk=trigger.pk)
        context_by_query = TurnContext(chat=by_query.chat, trigger=by_query)
        # A scheduled run's trigger, as the runner loads it: the schedule's actor (in memory
        # here) and in the metadata the schedule and who pays (its owner when it started).
        from copy import copy

        from schedules.models import Schedule

        schedule = Schedule.objects.create(owner=person, chat=trigger.chat, prompt="report",
                                           kind=Schedule.Kind.ONCE)  # fmt: skip
        scheduled = copy(trigger)
        scheduled.actor = copy(trigger.actor)
        scheduled.actor.namespace = "schedule"
        scheduled.metadata = {"schedule": schedule.pk, "payer": person.pk}
        context_scheduled = TurnContext(chat=trigger.chat, trigger=scheduled,
                                        actor=scheduled.actor)  # fmt: skip
        # One stored before payers were: who pays is its schedule's owner, read.
        legacy = copy(scheduled)
        legacy.metadata = {"schedule": schedule.pk}
        context_legacy = TurnContext(chat=trigger.chat, trigger=legacy, actor=legacy.actor)
        pending = TurnSpend(model="big-model", prompt_tokens=1200, completion_tokens=300)

        def check():
            assert budget_check(person.pk, ids["chat"], now=timezone.now()) is None

        def gate_later():
            assert budget_turn_gate(context, pending) is None

        def gate_first():
            trigger.__dict__.pop("_budgets_attributed_person_id", None)  # a new run
            assert budget_turn_gate(context, pending) is None

        def gate_first_probing():
            from budgets.selectors import _remember

            _remember(False)  # as if this process's last read had found no budget
            gate_first()

        def gate_first_by_query():
            by_query.__dict__.pop("_budgets_attributed_person_id", None)
            assert budget_turn_gate(context_by_query, pending) is None

        def gate_first_scheduled():
            scheduled.__dict__.pop("_budgets_attributed_person_id", None)
            assert budget_turn_gate(context_scheduled, pending) is None

        def gate_first_legacy():
            legacy.__dict__.pop("_budgets_attributed_person_id", None)
            assert budget_turn_gate(context_legacy, pending) is None

        def before_check():
            assert former_check(person.pk, ids["chat"], now=timezone.now()) is None

        def before_gate():
            assert former_gate(context, pending) is None

        from budgets.selectors import month_bounds
        from usage.selectors import spend

        start, end = month_bounds(timezone.now())
        cases = [
            ("spend(): the person's month", lambda: spend(start=start, end=end,
                                                          person_id=person.pk)),
            ("spend(): the chat's month", lambda: spend(start=start, end=end,
                                                        chat_id=ids["chat"])),
            ("spend(): the hub's month", lambda: spend(start=start, end=end)),
            ("before: budget_check (3 caps)", before_check),
            ("before: turn gate", before_gate),
            ("budget_check (3 caps)", check),
            ("turn gate, first check of a run", gate_first),
            ("turn gate, first check, probing first", gate_first_probing),
            ("turn gate, first check, attribution by query", gate_first_by_query),
            ("turn gate, first check of a scheduled run", gate_first_scheduled),
            ("turn gate, first check of a scheduled run stored before payers",
             gate_first_legacy),
            ("turn gate, later checks of the run", gate_later),
        ]  # fmt: skip
        rows = measure(_only(cases, args.only), runs=args.runs, repeats=args.repeats)
        if args.explain:
            explain(person.pk, ids["chat"], start, end, pending.model, timezone.now().date())
        Budget.objects.all().delete()
        cases = [
            ("no budget at all: budget_check", check),
            ("no budget at all: turn gate", gate_first),
            ("no budget at all, before: turn gate", before_gate),
        ]
        rows += measure(_only(cases, args.only), runs=args.runs, repeats=args.repeats)
        print(f"database: {common.database_description()}")
        print(f"daily rows: {UsageDay.objects.count():,} over {args.days} days; "
              f"{args.repeats} rounds of {args.runs} runs\n")  # fmt: skip
        print(common.markdown_table(["what", "queries", "p50 ms", "p95 ms"], rows))
        print()
        print(common.markdown_table(["", ""], list(common.machine_info().items())))


def _only(cases: list, text: str) -> list:
    return [case for case in cases if text in case[0]]


def explain(person_id: int, chat_id: int, start, end, model: str, day) -> None:
    """Print the plan of the turn gate's statement (every scope, the model's price)."""
    from django.db import connection

    from budgets.selectors import check_query

    sql, params = check_query(person_id, chat_id, start, end, model, day)
    prefix = "EXPLAIN QUERY PLAN " if connection.vendor == "sqlite" else "EXPLAIN ANALYZE "
    with connection.cursor() as cursor:
        cursor.execute(prefix + sql, params)
        for row in cursor.fetchall():
            print(" | ".join(str(value) for value in row))
    print()


if __name__ == "__main__":
    main()
