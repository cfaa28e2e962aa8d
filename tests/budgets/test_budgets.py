"""Budgets that hold: a person, chat or hub at its monthly cap gets a clear answer instead of
a model reply (the turn ends without calling the model), their message is kept, and every
channel delivers the answer as the turn's reply; a tool loop stops at the cap between its
iterations; the default and an override; only staff set budgets."""

import io
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from budgets import lastmile
from budgets.models import Budget, Scope
from budgets.selectors import budget_check, month_bounds
from budgets.services import budget_save
from chats.agent.llm import get_provider
from chats.agent.loop import run_claimed_turn
from chats.agent.registry import Tool, register_tool_provider, registry
from chats.agent.turns import Claim, turn_claim
from chats.models import Message, Turn
from tests.chats.dashboard_helpers import login, page_url
from tests.fakes import openai_server as fake_openai
from tests.usage.helpers import price, say
from usage.models import Kind, UsageRecord
from usage.services import usage_record

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fake(settings):
    with fake_openai.FakeOpenAI() as server:
        server.configure(settings, LLM_MAX_RETRIES=1)
        yield server


@pytest.fixture
def ada(make_person):
    return make_person("ada", is_staff=True)


def run(turn):
    claim = turn_claim(turn_id=turn.pk, worker="test")
    assert claim.outcome is Claim.CLAIMED
    return run_claimed_turn(claim.turn, provider=get_provider())


def spent(*, person=None, chat_id=None, tokens=0, model="m", at=None):
    """Spend already in the ledger this month (as earlier turns would have left it)."""
    return usage_record(
        kind=Kind.TURN,
        chat_id=chat_id,
        person_id=person.pk if person else None,
        model=model,
        prompt_tokens=tokens,
        at=at,
    )


def cap(by, **fields):
    return budget_save(budget=Budget(**fields), by=by)


def month():
    return month_bounds(timezone.now())[0]


def resets_on_text():
    _, end = month_bounds(timezone.now())
    return f"{end.day} {end:%B %Y}"


def expected_answer(whose, amount, setter="ada"):
    return (
        f"{whose} monthly budget of {amount}, set by {setter}, is used up; it resets on "
        f"{resets_on_text()}. Ask {setter} or another staff member to raise it."
    )


# --- the dashboard and the API, through the same turn path ---------------------------------


def test_a_person_at_their_cap_gets_the_answer_on_the_dashboard_and_their_message_is_kept(
    fake, ada, owner, team_chat
):
    cap(ada, scope=Scope.PERSON, person=owner, monthly_tokens=200_000)
    spent(person=owner, tokens=200_000)
    client = login(owner)
    response = client.post(f"{page_url(team_chat)}messages", {"text": "plan the launch"})
    assert response.status_code in (201, 302)
    turn = Turn.objects.get(chat=team_chat)
    done = run(turn)

    answer = expected_answer("Your", "200,000 tokens")
    assert done.status == Turn.Status.COMPLETED
    assert done.reply.text == answer and done.reply.metadata.get("refused") is True
    assert fake.requests == []  # the model was never called
    assert Message.objects.filter(chat=team_chat, role="user", text="plan the launch").exists()
    page = client.get(page_url(team_chat)).content.decode()
    assert "plan the launch" in page and "set by ada" in page and resets_on_text() in page


def test_an_integration_user_of_api_v1_over_the_token_owners_cap_gets_the_answer(
    fake, ada, owner, api_for
):
    cap(ada, scope=Scope.PERSON, person=owner, monthly_tokens=1_000)
    spent(person=owner, tokens=1_000)
    api = api_for(owner)
    posted = api.post(
        "/api/v1/messages",
        {"chat_id": "crm", "user_id": "crm-7", "message_id": "m1", "text": "hi", "respond": True},
    )
    assert posted.status_code == 201, posted.content
    turn = Turn.objects.get(chat__chat_key="api:crm")
    done = run(turn)
    assert done.reply.text == expected_answer("Your", "1,000 tokens")
    assert fake.requests == []
    history = api.get("/api/v1/chats/api:crm/messages").json()
    texts = [m["text"] for m in history["messages"]]
    assert "hi" in texts and done.reply.text in texts


def test_an_unlinked_telegram_user_is_held_by_the_chat_cap(fake, ada):
    turn = say("hi", channel="telegram", chat_id="-100", user="tg-42")
    cap(ada, scope=Scope.CHAT, chat_id=turn.chat_id, monthly_tokens=500)
    spent(chat_id=turn.chat_id, tokens=600)
    done = run(turn)
    assert done.reply.text == expected_answer("This chat's", "500 tokens")
    assert Message.objects.filter(pk=turn.trigger_id, text="hi").exists()
    assert fake.requests == []


# --- which caps apply ----------------------------------------------------------------------


def test_a_person_under_the_cap_is_unaffected(fake, ada, owner):
    cap(ada, scope=Scope.PERSON, person=owner, monthly_tokens=200_000)
    cap(ada, scope=Scope.HUB, monthly_tokens=10_000_000)
    spent(person=owner, tokens=199_000)
    done = run(say("hi", channel="web", user=str(owner.pk), person=owner))
    assert done.status == Turn.Status.COMPLETED and "refused" not in done.reply.metadata
    assert len(fake.requests) == 1


def test_the_default_applies_to_everyone_and_an_override_replaces_it(ada, owner, member):
    cap(ada, scope=Scope.PERSON, monthly_tokens=100)  # the default
    cap(ada, scope=Scope.PERSON, person=member, monthly_tokens=1_000)  # member's override
    spent(person=owner, tokens=100)
    spent(person=member, tokens=100)
    now = timezone.now()
    refusal = budget_check(owner.pk, None, now=now)
    assert refusal is not None and refusal.cap == "100 tokens" and refusal.scope == Scope.PERSON
    assert budget_check(member.pk, None, now=now) is None  # the override is larger
    spent(person=member, tokens=900)
    assert budget_check(member.pk, None, now=now).cap == "1,000 tokens"


def test_the_hub_cap_holds_everyone_and_names_who_set_it(fake, make_person, owner):
    grace = make_person("grace", is_staff=True)
    cap(grace, scope=Scope.HUB, monthly_cost=Decimal("5"))
    price(fake.model, 1_000, 0)  # 0.001 USD per prompt token
    spent(person=None, tokens=5_000, model=fake.model)  # somebody else's 5.00 USD
    done = run(say("hi", channel="web", user=str(owner.pk), person=owner))
    assert done.reply.text == expected_answer("The hub's", "5.00 USD", setter="grace")
    assert fake.requests == []


def test_only_the_calendar_month_counts_and_it_resets_on_the_first(ada, owner):
    cap(ada, scope=Scope.PERSON, person=owner, monthly_tokens=100)
    spent(person=owner, tokens=500, at=datetime(2026, 10, 31, 23, 59, tzinfo=UTC))
    assert budget_check(owner.pk, None, now=datetime(2026, 11, 1, 0, 1, tzinfo=UTC)) is None
    refusal = budget_check(owner.pk, None, now=datetime(2026, 10, 15, tzinfo=UTC))
    assert refusal.resets_on == date(2026, 11, 1)
    december = budget_check(owner.pk, None, now=datetime(2026, 12, 31, tzinfo=UTC))
    assert december is None and month_bounds(datetime(2026, 12, 5))[1] == date(2027, 1, 1)


def test_a_money_cap_counts_priced_spend_only_a_tokens_cap_counts_all(ada, owner):
    cap(ada, scope=Scope.PERSON, person=owner, monthly_cost=Decimal("1"))
    spent(person=owner, tokens=10_000_000, model="unpriced")
    now = timezone.now()
    assert budget_check(owner.pk, None, now=now) is None  # unknown cost is not guessed
    Budget.objects.filter(person=owner).update(monthly_tokens=10_000_000)
    assert budget_check(owner.pk, None, now=now).limit == "tokens"


# --- between iterations ---------------------------------------------------------------------


class _Adder:
    def tools(self):
        schema = {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        }
        return [Tool("add", "Add two integers.", schema, lambda ctx, a: {"sum": a["a"] + a["b"]})]


@pytest.fixture
def adder():
    provider = _Adder()
    register_tool_provider(provider)
    yield provider
    registry.tool_providers.remove(provider)


def test_a_tool_loop_stops_at_the_cap_between_iterations(fake, adder, ada, owner):
    fake.script(
        fake_openai.tool_calls([("c1", "add", {"a": 1, "b": 2})]),
        fake_openai.tool_calls([("c2", "add", {"a": 3, "b": 4})]),
        fake_openai.text("never reached"),
    )
    # Nothing spent yet: the first call goes; its own tokens (not in the ledger until the
    # turn stores them) use the cap up, so the loop stops before the second call.
    cap(ada, scope=Scope.PERSON, person=owner, monthly_tokens=1)
    done = run(say("add twice", channel="web", user=str(owner.pk), person=owner))
    assert len(fake.requests) == 1
    assert done.status == Turn.Status.COMPLETED
    assert done.iterations == 1  # one model call, as the ledger records it
    assert done.reply.text == expected_answer("Your", "1 token")
    assert Message.objects.filter(chat=done.chat, role="tool").count() == 1  # c1 was answered
    # The turn's tokens reached the ledger at its end as usual.
    assert UsageRecord.objects.get(kind=Kind.TURN, turn=done).calls == 1
    assert budget_check(owner.pk, None, now=timezone.now()) is not None


# --- who sets budgets -------------------------------------------------------------------------


def test_only_staff_set_budgets(owner):
    with pytest.raises(PermissionDenied):
        budget_save(budget=Budget(scope=Scope.HUB, monthly_tokens=10), by=owner)
    assert not Budget.objects.exists()


def test_the_admin_is_for_staff_and_records_who_set_the_budget(client, ada, owner, admin_user):
    client.force_login(owner)  # not staff
    assert client.get("/admin/budgets/budget/add/").status_code == 302
    client.force_login(admin_user)
    response = client.post(
        "/admin/budgets/budget/add/",
        {"scope": "hub", "monthly_tokens": "5000", "monthly_cost": ""},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    budget = Budget.objects.get()
    assert budget.set_by == admin_user and budget.monthly_tokens == 5000


def test_the_terminal_prints_the_answer_and_keeps_the_message(fake_llm, ada, owner):
    from django.core.management import call_command

    cap(ada, scope=Scope.PERSON, person=owner, monthly_tokens=10)
    spent(person=owner, tokens=10)
    out = io.StringIO()
    call_command("chat", "-m", "hello there", "--profile", "ops", "--user", "olivia", stdout=out)
    assert expected_answer("Your", "10 tokens") in " ".join(out.getvalue().split())
    assert fake_llm.requests == []
    history = Message.objects.filter(chat__chat_key__startswith="cli:").order_by("id")
    assert [m.role for m in history] == ["user", "assistant"]
    assert history[0].text == "hello there"


def test_a_personal_key_on_v1_gets_the_answer_as_the_completion(fake, ada, owner):
    import json

    from asgiref.sync import async_to_sync

    from openai_api import completions
    from openai_api.parsing import ConversationRequest
    from openai_api.services import conversation_post

    cap(ada, scope=Scope.PERSON, person=owner, monthly_tokens=10)
    spent(person=owner, tokens=10)
    landed = conversation_post(
        person=owner,
        request=ConversationRequest(
            items=(("user", "hello"),), system="", chat_key=None, stream=False, include_usage=False
        ),
    )
    seen = []
    claim = turn_claim(turn_id=landed.turn.pk, worker="test")
    run_claimed_turn(claim.turn, provider=get_provider(), on_event=seen.append)
    assert fake.requests == []

    async def follow():
        for event in seen:
            yield event

    response = async_to_sync(completions._whole)(landed, follow(), "chatcmpl-x", owner)
    body = json.loads(response.content)
    assert response.status_code == 200, body
    assert body["choices"][0]["message"]["content"] == expected_answer("Your", "10 tokens")
    assert Message.objects.filter(chat=landed.chat, role="user", text="hello").exists()


def test_one_persons_used_up_cap_holds_nobody_else(fake, ada, owner, member):
    cap(ada, scope=Scope.PERSON, monthly_tokens=100)  # the default, for both
    spent(person=owner, tokens=100)
    held = run(say("hi", channel="web", chat_id="r1", user=str(owner.pk), person=owner))
    free = run(say("hi", channel="web", chat_id="r2", user=str(member.pk), person=member))
    assert held.reply.metadata.get("refused") is True
    assert "refused" not in free.reply.metadata and len(fake.requests) == 1


def test_a_chat_cap_holds_only_its_chat(ada, owner):
    first = say("a", channel="web", chat_id="r1", user=str(owner.pk), person=owner)
    second = say("b", channel="web", chat_id="r2", user=str(owner.pk), person=owner)
    cap(ada, scope=Scope.CHAT, chat_id=first.chat_id, monthly_tokens=50)
    spent(person=owner, chat_id=first.chat_id, tokens=50)
    now = timezone.now()
    assert budget_check(owner.pk, first.chat_id, now=now).scope == Scope.CHAT
    assert budget_check(owner.pk, second.chat_id, now=now) is None


def test_a_failing_gate_is_logged_and_does_not_stop_the_turn(fake, owner, caplog):
    from chats.agent.registry import register_turn_gate

    def broken(context, pending):
        raise RuntimeError("the budget store is down")

    register_turn_gate(broken)
    try:
        done = run(say("hi", channel="web", user=str(owner.pk), person=owner))
    finally:
        registry.turn_gates.remove(broken)
    assert done.status == Turn.Status.COMPLETED and len(fake.requests) == 1
    assert "turn gate" in caplog.text


def test_a_budget_needs_a_cap_and_the_right_target(ada, owner):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError):
        cap(ada, scope=Scope.HUB)  # no cap at all
    with pytest.raises(ValidationError):
        cap(ada, scope=Scope.HUB, person=owner, monthly_tokens=1)
    with pytest.raises(ValidationError):
        cap(ada, scope=Scope.CHAT, monthly_tokens=1)  # which chat?
    cap(ada, scope=Scope.HUB, monthly_tokens=1)
    with pytest.raises(ValidationError):
        cap(ada, scope=Scope.HUB, monthly_tokens=2)  # one hub budget
    assert Budget.objects.count() == 1


def test_telegram_delivers_the_answer_as_the_reply(fake, ada):
    import asyncio

    from asgiref.sync import async_to_sync

    from bots.delivery import ChatGate, ReplyDelivery
    from bots.models import OutboundMessage

    turn = say("hi", channel="telegram", chat_id="1001", user="1001")  # an unlinked user
    cap(ada, scope=Scope.CHAT, chat_id=turn.chat_id, monthly_tokens=10)
    spent(chat_id=turn.chat_id, tokens=10)
    row = OutboundMessage.objects.create(
        kind="reply", turn=turn, chat_id=turn.chat_id, telegram_chat_id=1001
    )
    seen = []
    claim = turn_claim(turn_id=turn.pk, worker="test")
    run_claimed_turn(claim.turn, provider=get_provider(), on_event=seen.append)
    assert fake.requests == []

    class Recorder:  # the bot's sender, as the bridge's own tests record it
        gate = ChatGate()

        def __init__(self):
            self.sent, self.edited = [], []

        async def typing(self, **kwargs):
            pass

        async def send(self, **kwargs):
            self.sent.append(kwargs["plain"])
            return 77

        async def edit(self, **kwargs):
            self.edited.append(kwargs["plain"])

    async def deliver(recorder):
        queue = asyncio.Queue()
        for event in seen:
            queue.put_nowait(event)
        await ReplyDelivery(recorder, row, queue).run()

    recorder = Recorder()
    async_to_sync(deliver)(recorder)
    answer = expected_answer("This chat's", "10 tokens")
    shown = (recorder.edited or recorder.sent)[-1]
    assert answer in " ".join(shown.split())
    row.refresh_from_db()
    assert row.status == "delivered"
    assert Message.objects.filter(pk=turn.trigger_id, text="hi").exists()


def test_staff_without_the_budget_permission_cannot_set_budgets_in_the_admin(client, make_person):
    from django.contrib.auth.models import Permission

    clerk = make_person("clerk", is_staff=True)
    client.force_login(clerk)
    assert client.get("/admin/budgets/budget/add/").status_code == 403
    refused = client.post("/admin/budgets/budget/add/", {"scope": "hub", "monthly_tokens": "9"})
    assert refused.status_code == 403 and not Budget.objects.exists()
    clerk.user_permissions.add(Permission.objects.get(codename="add_budget"))
    response = client.post("/admin/budgets/budget/add/", {"scope": "hub", "monthly_tokens": "9"})
    assert response.status_code == 302 and Budget.objects.get().set_by == clerk


def two_turns_at_99_percent(fake, owner, *, b_person, b_chat="r2"):
    """Turn A passes its start check at 99 % and calls the model (a tool call); while its tool
    runs, turn B (by `b_person`) starts and runs to its end. Returns (A, B)."""
    turn_b = say("b", channel="web", chat_id=b_chat, user=str(b_person.pk), person=b_person)
    outcome = {}

    def run_b(context, arguments):
        outcome["b"] = run(turn_b)  # B starts while A is between its iterations
        return {"ok": True}

    schema = {"type": "object", "properties": {}}

    class _Other:
        def tools(self):
            return [Tool("other", "Let the other turn run.", schema, run_b, timeout_seconds=60)]

    provider = _Other()
    register_tool_provider(provider)
    fake.script(
        fake_openai.tool_calls([("c1", "other", {})]),  # A's first call
        fake_openai.text("B's answer."),  # B's call, if it gets one
        fake_openai.text("A's answer."),
    )
    try:
        turn_a = run(say("a", channel="web", chat_id="r1", user=str(owner.pk), person=owner))
    finally:
        registry.tool_providers.remove(provider)
    return turn_a, outcome["b"]


def test_two_turns_started_together_at_99_percent_overshoot_by_one_turn_at_most(fake, ada, owner):
    """A holds the cap's last mile from its first check: B, started while A runs, gets an
    answer saying so without calling the model (its message is kept), and A stops at its next
    check. Only A's one model call went past the cap: one turn's worth."""
    cap(ada, scope=Scope.PERSON, person=owner, monthly_tokens=1_000)
    spent(person=owner, tokens=990)
    turn_a, turn_b = two_turns_at_99_percent(fake, owner, b_person=owner)

    assert turn_b.reply.metadata.get("refused") is True
    assert turn_b.reply.text == (
        "Your monthly budget of 1,000 tokens, set by ada, is almost used up (99 %), and "
        "another reply is using what is left of it. Send your message again once that reply "
        f"is finished; the budget resets on {resets_on_text()} (or ask ada or another staff "
        "member to raise it)."
    )
    assert Message.objects.filter(role="user", text="b", chat__chat_key="web:r2").exists()
    assert turn_a.reply.metadata.get("refused") is True  # A stopped at its next check
    assert turn_a.reply.text == expected_answer("Your", "1,000 tokens")
    assert len(fake.requests) == 1  # A's first call: the only spend past the check
    assert lastmile.holder(lastmile.claim_key(Budget.objects.get().pk, None, month())) is None


def test_the_last_mile_is_free_again_once_the_holders_spend_is_stored(fake, ada, owner):
    """A turn in the last mile that ends releases the claim: the next turn's check sees its
    spend and, still under the cap, may go on."""
    cap(ada, scope=Scope.PERSON, person=owner, monthly_tokens=100_000)
    spent(person=owner, tokens=95_000)
    fake.script(fake_openai.text("first"), fake_openai.text("second"))
    first = run(say("one", channel="web", chat_id="r1", user=str(owner.pk), person=owner))
    second = run(say("two", channel="web", chat_id="r2", user=str(owner.pk), person=owner))
    assert [first.reply.text, second.reply.text] == ["first", "second"]
    assert len(fake.requests) == 2


def test_far_from_the_cap_turns_run_together(fake, ada, owner):
    cap(ada, scope=Scope.PERSON, person=owner, monthly_tokens=1_000_000)
    spent(person=owner, tokens=500_000)  # 50 %: not the last mile
    turn_a, turn_b = two_turns_at_99_percent(fake, owner, b_person=owner)
    assert turn_b.reply.text == "B's answer." and turn_a.reply.text == "A's answer."


def test_the_default_budgets_last_mile_is_each_persons_own(fake, ada, owner, member):
    """The default caps each person alone: one person's last mile never holds another's."""
    cap(ada, scope=Scope.PERSON, monthly_tokens=1_000)
    spent(person=owner, tokens=990)
    spent(person=member, tokens=990)
    turn_a, turn_b = two_turns_at_99_percent(fake, owner, b_person=member)
    assert turn_b.reply.text == "B's answer."  # the member's own last mile was free
    assert turn_a.reply.metadata.get("refused") is True  # the owner's cap is used up now
    assert len(fake.requests) == 2
