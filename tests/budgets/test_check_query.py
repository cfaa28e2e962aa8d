"""The budget check in one statement: it reads what `usage.selectors.spend` and the ORM read
(the month's tokens and priced cost of a person, a chat and the hub, on either side of a
month's edges; the budgets that apply; caps and prices as decimals), with one query per
check; it caches no spend and no budget (a finished turn, a budget saved or deleted, is
seen by the next check); the turn gate reads who spends once per run, and with no budget
at all only probes the budgets table."""

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.utils import timezone

from budgets.models import Budget, Scope
from budgets.selectors import (
    applicable_budgets,
    budget_check,
    budget_check_unrecorded,
    budgets_exist,
    caps_with_spend,
    month_bounds,
)
from budgets.services import _attributed_person_id, budget_save, budget_turn_gate
from chats.agent.registry import TurnContext, TurnSpend
from chats.api.services import api_actor_namespace
from chats.models import Message
from schedules.models import Schedule
from tests.usage.helpers import price, say
from usage.models import Kind
from usage.prices import cost_nanos
from usage.selectors import spend
from usage.services import attribution_of_trigger, usage_record

pytestmark = [pytest.mark.django_db, pytest.mark.storage]  # raw SQL: both databases

NOVEMBER = datetime(2026, 11, 15, 12, tzinfo=UTC)


def at(*parts):
    return datetime(*parts, tzinfo=UTC)


def record(person=None, chat=None, *, model="priced", prompt=0, completion=0, when=NOVEMBER):
    return usage_record(
        kind=Kind.TURN,
        chat_id=chat.pk if chat else None,
        person_id=person.pk if person else None,
        model=model,
        prompt_tokens=prompt,
        completion_tokens=completion,
        at=when,
    )


def cap(by, **fields):
    return budget_save(budget=Budget(**fields), by=by)


@pytest.fixture
def ada(make_person):
    return make_person("ada", is_staff=True)


@pytest.fixture
def ledger(owner, member, team_chat):
    """A month of spend by two people in two chats, priced and not, and spend just outside
    November on both sides."""
    other = say("elsewhere", channel="web", chat_id="other-room", user="x").chat
    price("priced", 2.5, 10)  # per million tokens
    price("priced", 3.000001, 12.5, valid_from=date(2026, 11, 20))  # a new price mid-month
    record(owner, team_chat, prompt=1_000, completion=333, when=at(2026, 11, 1, 0, 0))
    record(owner, team_chat, model="unpriced", prompt=70_000, completion=5, when=NOVEMBER)
    record(owner, other, prompt=12_345, completion=678, when=at(2026, 11, 25, 8))
    record(member, team_chat, prompt=999, completion=1, when=at(2026, 11, 30, 23, 59, 59))
    record(None, team_chat, prompt=500, when=NOVEMBER)  # an unlinked Telegram user
    record(None, None, model="unpriced", prompt=42, when=NOVEMBER)  # neither person nor chat
    record(owner, team_chat, prompt=10**6, completion=10**6, when=at(2026, 10, 31, 23, 59, 59))
    record(owner, team_chat, prompt=10**6, completion=10**6, when=at(2026, 12, 1, 0, 0))
    return {"other": other}


def every_scope(ada, owner, team_chat):
    cap(ada, scope=Scope.PERSON, person=owner, monthly_tokens=10**12)
    cap(ada, scope=Scope.CHAT, chat=team_chat, monthly_cost=Decimal("1000"))
    cap(ada, scope=Scope.HUB, monthly_tokens=10**12)


@pytest.mark.parametrize("month", [at(2026, 10, 31, 23), NOVEMBER, at(2026, 12, 1, 0, 0, 1)])
def test_the_month_spend_is_what_usage_reads_for_the_person_the_chat_and_the_hub(
    ada, owner, member, team_chat, ledger, month
):
    every_scope(ada, owner, team_chat)
    start, end = month_bounds(month)
    caps = {c.scope: c for c in caps_with_spend(owner.pk, team_chat.pk, start=start, end=end)}
    expected = {
        Scope.PERSON: spend(start=start, end=end, person_id=owner.pk),
        Scope.CHAT: spend(start=start, end=end, chat_id=team_chat.pk),
        Scope.HUB: spend(start=start, end=end),
    }
    for scope, spent in expected.items():
        assert (caps[scope].spent_tokens, caps[scope].spent_cost_nanos) == (
            spent.tokens,
            spent.cost_nanos,
        ), scope
    if month == NOVEMBER:  # the fixture's figures, so the comparison is not of two zeros
        assert caps[Scope.PERSON].spent_tokens == 1_333 + 70_005 + 13_023
        assert caps[Scope.HUB].spent_tokens == 1_333 + 70_005 + 13_023 + 1_000 + 500 + 42
        assert 0 < caps[Scope.PERSON].spent_cost_nanos < caps[Scope.HUB].spent_cost_nanos


def test_the_budgets_that_apply_are_those_of_the_orm(ada, owner, member, team_chat, ledger):
    cap(ada, scope=Scope.PERSON, monthly_tokens=100)  # the default
    cap(ada, scope=Scope.PERSON, person=member, monthly_cost=Decimal("0.01"))
    cap(ada, scope=Scope.CHAT, chat=ledger["other"], monthly_tokens=5)
    cap(ada, scope=Scope.HUB, monthly_cost=Decimal("123456789012.34"))
    start, end = month_bounds(NOVEMBER)
    for person in (owner, member, None):
        for chat in (team_chat, ledger["other"], None):
            person_id, chat_id = getattr(person, "pk", None), getattr(chat, "pk", None)
            caps = caps_with_spend(person_id, chat_id, start=start, end=end)
            budgets = applicable_budgets(person_id, chat_id)
            assert [(c.budget_id, c.scope, c.person_id) for c in caps] == [
                (b.pk, b.scope, b.person_id) for b in budgets
            ]
            assert [(c.monthly_tokens, c.monthly_cost, c.set_by_id) for c in caps] == [
                (b.monthly_tokens, b.monthly_cost, b.set_by_id) for b in budgets
            ]


def test_a_decimal_cap_and_price_read_as_the_orm_reads_them(ada, owner):
    for amount in ("0.01", "0.10", "19.99", "123456789012.34", "999999999999.99"):
        Budget.objects.all().delete()
        cap(ada, scope=Scope.HUB, monthly_cost=Decimal(amount))
        (read,) = caps_with_spend(None, None, start=date(2026, 11, 1), end=date(2026, 12, 1))
        assert read.monthly_cost == Budget.objects.get().monthly_cost == Decimal(amount)
    # A price read inexactly moves the number of tokens at which a money cap is reached.
    cap(ada, scope=Scope.PERSON, person=owner, monthly_cost=Decimal("1234.56"))
    day = NOVEMBER.date()
    for n, input_price in enumerate(("0.000001", "0.000003", "0.1", "2.5", "123456.123456",
                                     "999999.999999")):  # fmt: skip
        model = f"m{n}"
        price(model, input_price, "0")
        low, high = 1, 10**16  # the fewest prompt tokens whose cost (usage's rule) reaches it
        while low < high:
            middle = (low + high) // 2
            if cost_nanos(model, day, middle, 0) >= 1234_560_000_000:
                high = middle
            else:
                low = middle + 1

        def refused(tokens, model=model):
            return budget_check_unrecorded(
                owner.pk, None, now=NOVEMBER, model=model, prompt_tokens=tokens,
                completion_tokens=0,
            ) is not None  # fmt: skip

        assert refused(low) and not refused(low - 1), input_price


def test_unrecorded_tokens_are_priced_at_the_days_price_and_unpriced_count_for_tokens_only(
    ada, owner
):
    price("priced", 500, 0)  # 0.0005 a prompt token, then 0.001 from the 16th
    price("priced", 1_000, 0, valid_from=date(2026, 11, 16))
    price("from-december", 1_000, 0, valid_from=date(2026, 12, 1))
    cap(ada, scope=Scope.PERSON, person=owner, monthly_cost=Decimal("1"))

    def check(when, model, tokens):
        return budget_check_unrecorded(
            owner.pk, None, now=when, model=model, prompt_tokens=tokens, completion_tokens=0
        )

    assert check(at(2026, 11, 16), "priced", 999) is None  # 0.999
    assert check(at(2026, 11, 16), "priced", 1_000).limit == "money"  # 1.00: reached
    assert check(at(2026, 11, 15, 23), "priced", 1_999) is None  # the former price
    assert check(at(2026, 11, 15, 23), "priced", 2_000).limit == "money"
    assert check(at(2026, 11, 16), "from-december", 10**9) is None  # no price yet that day
    assert check(at(2026, 11, 16), "unpriced", 10**9) is None  # unknown cost, never guessed
    Budget.objects.filter(person=owner).update(monthly_tokens=10**9)
    assert check(at(2026, 11, 16), "unpriced", 10**9).limit == "tokens"
    assert check(at(2026, 11, 16), "", 10**9).limit == "tokens"  # no model at all


# --- nothing cached ----------------------------------------------------------------------------


def test_a_finished_turn_and_a_budget_saved_or_deleted_are_seen_by_the_next_check(
    ada, owner, team_chat
):
    assert budget_check(owner.pk, team_chat.pk, now=NOVEMBER) is None  # no budget
    budget = cap(ada, scope=Scope.CHAT, chat=team_chat, monthly_tokens=1_000)
    assert budget_check(owner.pk, team_chat.pk, now=NOVEMBER) is None
    record(owner, team_chat, model="m", prompt=999)
    assert budget_check(owner.pk, team_chat.pk, now=NOVEMBER) is None
    record(owner, team_chat, model="m", prompt=1)  # another turn finished: 1,000
    assert budget_check(owner.pk, team_chat.pk, now=NOVEMBER).cap == "1,000 tokens"
    budget.monthly_tokens = 2_000
    budget_save(budget=budget, by=ada)
    assert budget_check(owner.pk, team_chat.pk, now=NOVEMBER) is None
    Budget.objects.filter(pk=budget.pk).update(monthly_tokens=10)  # no signal, still seen
    assert budget_check(owner.pk, team_chat.pk, now=NOVEMBER).cap == "10 tokens"
    budget.delete()
    assert budget_check(owner.pk, team_chat.pk, now=NOVEMBER) is None


def runner_context(turn) -> TurnContext:
    """The context the turn runner builds: the trigger loaded with its actor and person."""
    trigger = Message.objects.select_related("actor__person", "chat").get(pk=turn.trigger_id)
    actor = trigger.actor
    return TurnContext(chat=trigger.chat, trigger=trigger, turn=turn, actor=actor,
                       person=actor.person if actor else None)  # fmt: skip


def test_the_gate_sees_a_budget_set_or_deleted_during_a_run(ada, owner, team_chat):
    context = runner_context(say("hi", channel="web", chat_id="team-room", user=str(owner.pk),
                                 person=owner))  # fmt: skip
    pending = TurnSpend(model="m", prompt_tokens=500)
    assert budget_turn_gate(context, pending) is None  # no budget: nothing read but a probe
    budget = cap(ada, scope=Scope.PERSON, monthly_tokens=400)  # the default, set meanwhile
    assert "Your monthly budget of 400 tokens" in budget_turn_gate(context, pending)
    budget.delete()
    assert budget_turn_gate(context, pending) is None
    cap(ada, scope=Scope.HUB, monthly_tokens=500)
    assert "The hub's monthly budget" in budget_turn_gate(context, pending)


# --- queries per check -------------------------------------------------------------------------


def test_one_query_per_check_and_one_more_only_to_name_who_set_a_used_up_cap(
    ada, owner, team_chat, django_assert_num_queries
):
    cap(ada, scope=Scope.PERSON, monthly_tokens=10**9)
    cap(ada, scope=Scope.PERSON, person=owner, monthly_cost=Decimal("5"))
    cap(ada, scope=Scope.CHAT, chat=team_chat, monthly_tokens=10**9)
    cap(ada, scope=Scope.HUB, monthly_tokens=1_000)
    with django_assert_num_queries(1):
        assert budget_check(owner.pk, team_chat.pk, now=NOVEMBER) is None
    with django_assert_num_queries(1):
        assert budget_check_unrecorded(
            owner.pk, team_chat.pk, now=NOVEMBER, model="m", prompt_tokens=9, completion_tokens=0
        ) is None  # fmt: skip
    record(owner, team_chat, model="m", prompt=1_000)
    with django_assert_num_queries(2):  # the statement, then who set the hub's cap
        assert budget_check(owner.pk, team_chat.pk, now=NOVEMBER).set_by == "ada"


def test_the_gate_reads_who_spends_once_per_run_and_only_probes_without_budgets(
    ada, owner, team_chat, django_assert_num_queries
):
    turn = say("hi", channel="web", chat_id="team-room", user=str(owner.pk), person=owner)
    pending = TurnSpend(model="m", prompt_tokens=10, completion_tokens=5)
    budgets_exist()  # this process's last read: no budget
    context = runner_context(turn)
    with django_assert_num_queries(1):  # no budget: the probe only
        assert budget_turn_gate(context, pending) is None
    hub = cap(ada, scope=Scope.HUB, monthly_tokens=10**9)
    with django_assert_num_queries(2):  # first check of the run: the probe, the statement
        assert budget_turn_gate(context, pending) is None
    with django_assert_num_queries(1):  # later checks: the statement
        assert budget_turn_gate(context, pending) is None
    # A new run (another worker, a resumed turn) loads the trigger anew and reads it again;
    # the last read found budgets, so it goes straight to who spends and the statement.
    again = runner_context(turn)
    again.actor.namespace = "schedule"  # as if a schedule's actor: who pays is the payer its
    again.trigger.metadata = {"schedule": 10**9, "payer": owner.pk}  # trigger names
    with django_assert_num_queries(1):  # the statement alone
        assert budget_turn_gate(again, pending) is None
    hub.delete()  # no budget any more: that run's next check finds none, the next run probes
    with django_assert_num_queries(1):
        assert budget_turn_gate(again, pending) is None
    third = runner_context(turn)
    with django_assert_num_queries(1):  # the probe
        assert budget_turn_gate(third, pending) is None


def test_the_gate_attributes_spend_as_usage_does(
    owner, member, team_chat, django_assert_num_queries
):
    schedule = Schedule.objects.create(
        owner=member, chat=team_chat, prompt="report", kind=Schedule.Kind.ONCE
    )
    turns = [
        say("a", channel="web", chat_id="team-room", user=str(owner.pk), person=owner),
        say("b", channel="telegram", chat_id="-100", user="tg-42"),  # unlinked
        say("b2", channel="web", chat_id="team-room", user="ghost"),  # unlinked, web
        say("c", user="crm-7", actor_namespace=api_actor_namespace(owner)),  # API v1
        say("d", user="crm-8", actor_namespace="owner:abc"),  # forged: nobody
        say("e", channel="web", chat_id="team-room", user=str(schedule.pk),
            actor_namespace="schedule",
            metadata={"schedule": schedule.pk, "schedule_run": 1, "payer": member.pk}),
        # A payer whose account is gone: usage's rule finds nobody; the gate checks the
        # default's cap for the id (it reads no person table), which spends nothing.
        say("f", channel="web", chat_id="team-room", user=str(schedule.pk),
            actor_namespace="schedule", metadata={"schedule": schedule.pk, "payer": 10**9}),
        # Stored before payers were: the schedule's owner now.
        say("g", channel="web", chat_id="team-room", user=str(schedule.pk),
            actor_namespace="schedule", metadata={"schedule": schedule.pk, "schedule_run": 1}),
        # A payer is read from a schedule's actor only: nobody else names who pays.
        say("h", channel="web", chat_id="team-room", user="ghost",
            metadata={"schedule": schedule.pk, "payer": member.pk}),
    ]  # fmt: skip
    found = [_attributed_person_id(runner_context(turn)) for turn in turns]
    usage = [attribution_of_trigger(turn.trigger_id).person_id for turn in turns]
    assert usage == [owner.pk, None, None, owner.pk, None, member.pk, None, member.pk, None]
    assert found == usage[:6] + [10**9] + usage[7:]
    contexts = [runner_context(turn) for turn in turns]
    with django_assert_num_queries(0):  # from the loaded trigger and actor
        assert [_attributed_person_id(context) for context in contexts[:7]] == found[:7]
    with django_assert_num_queries(1):  # stored before payers were: its schedule's owner
        assert _attributed_person_id(contexts[7]) == member.pk
    with django_assert_num_queries(0):
        assert _attributed_person_id(contexts[8]) is None


def test_a_check_in_the_real_month_counts_todays_turns(ada, owner):
    cap(ada, scope=Scope.PERSON, person=owner, monthly_tokens=10)
    record(owner, None, model="m", prompt=10, when=timezone.now())
    assert budget_check(owner.pk, None, now=timezone.now()).limit == "tokens"


def test_a_scheduled_runs_payer_stays_when_its_schedule_is_deleted(
    ada, owner, member, team_chat, django_assert_num_queries
):
    """Who pays for a scheduled run is fixed in its trigger: the gate and usage find the
    owner's caps and month after the schedule is gone (they used to find nobody, and the
    run spent past its owner's cap)."""
    schedule = Schedule.objects.create(
        owner=member, chat=team_chat, prompt="report", kind=Schedule.Kind.ONCE
    )
    turn = say("report", channel="web", chat_id="team-room", user=str(schedule.pk),
               actor_namespace="schedule",
               metadata={"schedule": schedule.pk, "payer": member.pk})  # fmt: skip
    cap(ada, scope=Scope.PERSON, monthly_tokens=100)  # the default
    record(member, team_chat, model="m", prompt=60, when=timezone.now())
    schedule.delete()
    pending = TurnSpend(model="m", prompt_tokens=50, completion_tokens=0)
    context = runner_context(turn)
    with django_assert_num_queries(2):  # the statement, and the setter of the used-up cap
        answer = budget_turn_gate(context, pending)
    assert answer.startswith("Your monthly budget of 100 tokens, set by ada,")
    assert attribution_of_trigger(turn.trigger_id).person_id == member.pk
