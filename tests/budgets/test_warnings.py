"""Budget warnings: at 80 % of a cap the person it caps is told (a chat's owners and admins
for a chat's cap), at 100 % every active staff member, once per budget (per person for the
default) and calendar month, on their dashboard or in their private Telegram chat; nobody
else hears of it; two recordings at once warn once; unpriced work never moves a money cap."""

import threading
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone
from freezegun import freeze_time

from budgets import warnings
from budgets.models import Budget, BudgetWarning, Level, Scope
from budgets.selectors import month_bounds
from budgets.services import budget_save
from chats.agent.llm import get_provider
from chats.agent.loop import run_claimed_turn
from chats.agent.turns import Claim, turn_claim
from chats.models import ChatMember, PersonNotice
from chats.services import actor_get_or_create, actor_link, chat_member_ensure
from tests.chats.dashboard_helpers import login
from tests.fakes import openai_server as fake_openai
from tests.usage.helpers import price, say
from usage.models import Kind
from usage.services import usage_record

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.storage]

NOVEMBER = "2026-11-20 12:00:00"
DECEMBER = "2026-12-02 09:00:00"


@pytest.fixture
def ada(make_person):
    return make_person("ada", is_staff=True)


@pytest.fixture
def bob(make_person):
    return make_person("bob", is_staff=True)


def cap(by, **fields):
    return budget_save(budget=Budget(**fields), by=by)


def spend(*, person=None, chat=None, tokens=0, model="m"):
    """Model work recorded in the ledger, as a finished turn records it."""
    return usage_record(
        kind=Kind.TURN,
        chat_id=chat.pk if chat else None,
        person_id=person.pk if person else None,
        model=model,
        prompt_tokens=tokens,
    )


def told(person) -> list[str]:
    return list(
        PersonNotice.objects.filter(person=person, kind="budget_warning")
        .order_by("id")
        .values_list("text", flat=True)
    )


# --- the person's cap at 80 % -----------------------------------------------------------------


def test_80_percent_warns_the_person_once_a_month_and_again_the_next_month(ada, owner):
    with freeze_time(NOVEMBER):
        cap(ada, scope=Scope.PERSON, person=owner, monthly_tokens=1_000)
        spend(person=owner, tokens=700)
        assert told(owner) == []
        spend(person=owner, tokens=150)
        assert told(owner) == [
            "Your monthly budget of 1,000 tokens, set by ada, is 85% used: 850 tokens this "
            "month. It resets on 1 December 2026; once it is used up, you get no model replies "
            "until then: ask ada or another staff member if more is needed."
        ]
        spend(person=owner, tokens=50)  # 90 %: past 80 % again, in the same month
        assert len(told(owner)) == 1
        assert told(ada) == []  # staff hear at 100 % only
    with freeze_time(DECEMBER):
        spend(person=owner, tokens=810)
        assert len(told(owner)) == 2
        assert "is 81% used: 810 tokens this month" in told(owner)[1]
        assert "resets on 1 January 2027" in told(owner)[1]
    assert BudgetWarning.objects.filter(person=owner, level=Level.NEARLY).count() == 2


def test_no_warning_under_80_percent(ada, owner, bob, django_assert_num_queries):
    cap(ada, scope=Scope.PERSON, person=owner, monthly_tokens=1_000)
    cap(ada, scope=Scope.HUB, monthly_tokens=1_000)
    spend(person=owner, tokens=799)
    assert not PersonNotice.objects.exists()
    assert not BudgetWarning.objects.exists()
    with django_assert_num_queries(1):  # under 80 %: the check's one statement, nothing more
        warnings.budget_warnings_after_spend(person_id=owner.pk, chat_id=None, now=timezone.now())


def test_the_person_sees_the_warning_on_their_dashboard(ada, owner):
    cap(ada, scope=Scope.PERSON, person=owner, monthly_tokens=100)
    spend(person=owner, tokens=90)
    page = login(owner).get(reverse("chat_list")).content.decode()
    assert "Your monthly budget of 100 tokens, set by ada, is 90% used" in page


def test_a_turn_that_crosses_80_percent_warns_its_author(ada, owner, settings):
    cap(ada, scope=Scope.PERSON, person=owner, monthly_tokens=10)
    with fake_openai.FakeOpenAI() as fake:
        fake.configure(settings, LLM_MAX_RETRIES=0)
        fake.script(fake_openai.text("done"))
        turn = say("hi", channel="web", user=str(owner.pk), person=owner)
        claim = turn_claim(turn_id=turn.pk, worker="test")
        assert claim.outcome is Claim.CLAIMED
        done = run_claimed_turn(claim.turn, provider=get_provider())
    assert done.prompt_tokens + done.completion_tokens >= 10  # the fake counts its prompt
    [text] = told(owner)
    assert text.startswith("Your monthly budget of 10 tokens, set by ada, is used up:")


def test_a_person_with_a_private_telegram_chat_is_told_there(ada, owner, settings):
    from bots.models import OutboundMessage

    settings.TELEGRAM_BOT_TOKEN = "123:test"
    actor = actor_get_or_create(channel="telegram", user_id="4242", display_name="Olivia")
    actor_link(actor=actor, person=owner)
    cap(ada, scope=Scope.PERSON, person=owner, monthly_tokens=100)
    spend(person=owner, tokens=80)
    [queued] = OutboundMessage.objects.filter(telegram_chat_id=4242)
    assert "Your monthly budget of 100 tokens, set by ada, is 80% used" in queued.payload["text"]
    assert told(owner) == []  # not on the dashboard as well


# --- 100 %: staff ---------------------------------------------------------------------------


def test_100_percent_tells_every_active_staff_member_once(ada, bob, owner, make_person):
    retired = make_person("carl", is_staff=True, is_active=False)
    cap(ada, scope=Scope.PERSON, person=owner, monthly_tokens=1_000)
    spend(person=owner, tokens=1_000)
    _, end = month_bounds(datetime.now(UTC))
    resets = f"{end.day} {end:%B %Y}"
    staff_text = (
        "Budget used up: olivia's monthly budget of 1,000 tokens (set by ada) is used up: "
        f"1,000 tokens this month. Until it resets on {resets}, olivia gets no model replies. "
        "Raise it in the admin (Budgets) if that is not what you want."
    )
    assert told(ada) == [staff_text] and told(bob) == [staff_text]
    assert told(retired) == []
    # The person hears of it too (past 80 % at once): as used up.
    [text] = told(owner)
    assert text.startswith("Your monthly budget of 1,000 tokens, set by ada, is used up:")
    spend(person=owner, tokens=500)
    assert len(told(ada)) == 1 and len(told(bob)) == 1 and len(told(owner)) == 1
    warning = BudgetWarning.objects.get(level=Level.USED_UP)
    assert warning.told == 2 and warning.used == "1,000 tokens"


def test_the_default_cap_warns_each_person_and_staff_per_person(ada, owner, member):
    default = cap(ada, scope=Scope.PERSON, monthly_tokens=100)
    spend(person=owner, tokens=100)
    spend(person=member, tokens=85)
    assert len(told(owner)) == 1 and "Your monthly budget (the default)" in told(owner)[0]
    assert len(told(member)) == 1 and "is 85% used" in told(member)[0]
    [staff_text] = told(ada)
    assert staff_text.startswith(
        "Budget used up: olivia used up the default monthly budget per person of 100 tokens"
    )
    spend(person=member, tokens=15)
    assert len(told(ada)) == 2 and "marco used up the default" in told(ada)[1]
    assert BudgetWarning.objects.filter(budget=default).count() == 4


def test_a_new_cap_is_warned_of_again(ada, owner):
    budget = cap(ada, scope=Scope.PERSON, person=owner, monthly_tokens=100)
    spend(person=owner, tokens=85)
    budget.monthly_tokens = 200
    budget_save(budget=budget, by=ada)
    spend(person=owner, tokens=80)  # 165 of 200
    assert len(told(owner)) == 2 and "is 82% used" in told(owner)[1]


# --- a chat's cap and the hub's --------------------------------------------------------------


def test_a_chat_cap_warns_its_owners_and_admins_not_its_members(
    ada, owner, member, outsider, team_chat, make_person
):
    keeper = make_person("kim")
    chat_member_ensure(chat=team_chat, person=keeper, role=ChatMember.Role.ADMIN)
    cap(ada, scope=Scope.CHAT, chat=team_chat, monthly_tokens=1_000)
    spend(person=member, chat=team_chat, tokens=850)
    expected = (
        "The monthly budget of your chat “Team room” of 1,000 tokens, set by ada, is 85% used"
    )
    assert len(told(owner)) == 1 and told(owner)[0].startswith(expected)
    assert len(told(keeper)) == 1
    assert told(member) == [] and told(outsider) == [] and told(ada) == []
    spend(tokens=150, chat=team_chat)  # an unlinked user's spend counts against the chat
    [staff_text] = told(ada)
    assert staff_text.startswith(
        "Budget used up: the monthly budget of the chat “Team room” of 1,000 tokens (set by "
        "ada) is used up: 1,000 tokens this month. Until it resets on"
    )
    assert "nobody in that chat gets model replies" in staff_text
    assert len(told(owner)) == 1


def test_the_hub_cap_tells_staff_at_80_and_100_percent(ada, bob, owner):
    cap(ada, scope=Scope.HUB, monthly_tokens=1_000)
    spend(person=owner, tokens=800)
    assert told(owner) == []
    assert [t.startswith("The hub's monthly budget of 1,000 tokens, set by ada, is 80% used")
            for t in told(ada) + told(bob)] == [True, True]  # fmt: skip
    spend(tokens=200)
    assert "the hub's monthly budget of 1,000 tokens (set by ada) is used up" in told(bob)[1]
    assert len(told(ada)) == 2 and told(owner) == []


def test_someone_elses_cap_tells_nobody_else(ada, owner, member, outsider, team_chat):
    cap(ada, scope=Scope.PERSON, person=owner, monthly_tokens=100)
    spend(person=member, chat=team_chat, tokens=500)  # member has no cap
    assert not PersonNotice.objects.exists()
    spend(person=owner, chat=team_chat, tokens=90)
    assert len(told(owner)) == 1
    assert told(member) == [] and told(outsider) == []


# --- money, unpriced work ----------------------------------------------------------------------


def test_unpriced_work_never_moves_a_money_cap_and_priced_work_does(ada, owner):
    cap(ada, scope=Scope.PERSON, person=owner, monthly_cost="1.00")
    spend(person=owner, tokens=5_000_000, model="unpriced")  # an unknown cost, not 0 and not 1
    assert told(owner) == [] and not BudgetWarning.objects.exists()
    price("priced", 10, 0)  # 10 USD per million prompt tokens
    spend(person=owner, tokens=85_000, model="priced")  # 0.85 USD
    [text] = told(owner)
    assert text.startswith(
        "Your monthly budget of 1.00 USD, set by ada, is 85% used: 0.85 USD this month (work "
        "of models without a price is not counted: its cost is unknown)."
    )


def test_a_tokens_cap_beside_a_money_cap_counts_unpriced_work(ada, owner):
    cap(ada, scope=Scope.PERSON, person=owner, monthly_cost="1.00", monthly_tokens=1_000)
    spend(person=owner, tokens=900, model="unpriced")
    [text] = told(owner)
    assert "of 1,000 tokens, set by ada, is 90% used: 900 tokens this month" in text


# --- two recordings at once ------------------------------------------------------------------


def test_the_unique_warning_lets_only_one_of_two_racing_recordings_tell(ada, owner, monkeypatch):
    budget = cap(ada, scope=Scope.PERSON, person=owner, monthly_tokens=100)
    # Both recordings read "not warned yet" (as two workers reading before either commits).
    monkeypatch.setattr(warnings, "warned", lambda *args: set())
    spend(person=owner, tokens=85)
    spend(person=owner, tokens=5)
    assert len(told(owner)) == 1
    # The losing insert is the unique constraint's doing, not a read: it returns None.
    usage = warnings.Usage(percent=90, cap="100 tokens", used="90 tokens", unpriced_left_out=False)
    start, end = month_bounds(datetime.now(UTC))
    again = warnings.warn_once(
        budget=budget, subject_id=owner.pk, usage=usage, level=Level.NEARLY,
        month=start, resets_on=end,
    )  # fmt: skip
    assert again is None and len(told(owner)) == 1


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_two_workers_evaluating_at_once_warn_once(ada, bob, owner, monkeypatch):
    """Real concurrency (PostgreSQL: SQLite serialises writers anyway): two threads, each
    with its own connection, both read "not warned yet" before either inserts."""
    cap(ada, scope=Scope.PERSON, person=owner, monthly_tokens=100)
    spend(person=owner, tokens=100)
    BudgetWarning.objects.all().delete()  # as if the recording had not warned yet
    PersonNotice.objects.all().delete()
    barrier = threading.Barrier(2)
    read_warned = warnings.warned

    def warned_then_wait(*args):
        done = read_warned(*args)
        barrier.wait(timeout=10)
        return done

    monkeypatch.setattr(warnings, "warned", warned_then_wait)
    errors, made = [], []

    def evaluate():
        try:
            made.extend(
                warnings.budget_warnings_after_spend(
                    person_id=owner.pk, chat_id=None, now=datetime.now(UTC)
                )
            )
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=evaluate) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert len(made) == 2  # 80 % and 100 %, made once each, whichever thread won
    assert len(told(owner)) == 1 and len(told(ada)) == 1 and len(told(bob)) == 1
    assert BudgetWarning.objects.count() == 2
