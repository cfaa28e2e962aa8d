"""The dashboard's search page, a reply's context view and the status page."""

import pytest
from django.test import Client

from chats.models import Message, Turn
from chats.services import chat_member_ensure, message_ingest
from chats.views_search import highlighted_snippet
from tests.chats.dashboard_helpers import login, page_url, say

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def search(client, query, **kwargs):
    response = client.get("/search", {"q": query}, **kwargs)
    assert response.status_code == 200
    return response.content.decode()


# --- search -------------------------------------------------------------------------------


def test_search_finds_matches_in_readable_chats_and_links_into_the_chat(member, team_chat):
    message = say(team_chat, "We ship the deployment on Friday")
    page = search(login(member), "deployment")
    assert 'hx-get="/search"' in page and 'hx-target="#results"' in page
    assert 'hx-push-url="true"' in page and 'value="deployment"' in page
    assert f'href="{page_url(team_chat)}?at={message.pk}#message-{message.pk}"' in page
    assert "Team room" in page and 'class="badge badge-web"' in page and "Ana" in page
    assert "We ship the <mark>deployment</mark> on Friday" in page
    assert f'<time datetime="{message.created_at.isoformat()}' in page


def test_search_never_shows_chats_the_person_cannot_read(member, outsider, team_chat):
    say(team_chat, "the secret launch codeword is pelican")
    other = message_ingest(
        channel="api", chat_id="oscar-own", user_id="o", text="pelican sightings"
    ).message
    chat_member_ensure(chat=other.chat, person=outsider)

    outsider_page = search(login(outsider), "pelican")
    assert "pelican sightings" in outsider_page.replace("<mark>", "").replace("</mark>", "")
    assert "codeword" not in outsider_page and "Team room" not in outsider_page
    assert page_url(team_chat) not in outsider_page

    member_page = search(login(member), "pelican")
    assert "codeword" in member_page and "sightings" not in member_page


def test_every_term_is_highlighted_case_insensitively(member, team_chat):
    say(team_chat, "Redis streams and REDIS pubsub both carry events")
    page = search(login(member), "redis events")
    assert "<mark>Redis</mark> streams and <mark>REDIS</mark> pubsub" in page
    assert "carry <mark>events</mark>" in page


def test_hostile_text_in_snippets_is_escaped_and_marks_stay_intact(member, team_chat):
    say(team_chat, 'look <script>alert("x")</script> and <img src=x onerror=alert(2)> here')
    page = search(login(member), "script")
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;<mark>script</mark>&gt;alert(&quot;x&quot;)&lt;/<mark>script</mark>&gt;" in page
    assert "&lt;img src=x onerror=alert(2)&gt;" in page

    # A query that is itself markup is echoed escaped too.
    page = search(login(member), "<script>")
    assert "<script>" not in page and "<mark>&lt;script&gt;</mark>" in page


def test_highlighting_escapes_around_spans_and_ignores_bad_offsets():
    assert highlighted_snippet("a<b>c", [(1, 4)]) == "a<mark>&lt;b&gt;</mark>c"
    assert highlighted_snippet("x & y", []) == "x &amp; y"
    # overlapping, reversed and out-of-range spans never duplicate or drop text
    assert highlighted_snippet("abcdef", [(3, 99), (0, 2), (1, 3), (5, 4)]) == (
        "<mark>ab</mark><mark>c</mark><mark>def</mark>"
    )


def test_an_empty_query_shows_just_the_form(member, team_chat):
    say(team_chat, "anything at all")
    page = search(login(member), "   ")
    assert 'name="q"' in page and 'id="results"' in page
    assert "search-hit" not in page and "No messages" not in page


def test_htmx_gets_only_the_results_partial(member, team_chat):
    say(team_chat, "partial rendering works")
    response = login(member).get("/search", {"q": "rendering"}, headers=HTMX)
    body = response.content.decode()
    assert response.status_code == 200 and "HX-Request" in response["Vary"]
    assert "<html" not in body and "<form" not in body and 'id="results"' not in body
    assert "partial <mark>rendering</mark> works" in body

    empty = login(member).get("/search", {"q": "nothing-like-this"}, headers=HTMX)
    assert "No messages in your chats match" in empty.content.decode()

    # Back button after hx-push-url with a cold history cache: htmx asks for the whole page.
    restore = {**HTMX, "HX-History-Restore-Request": "true"}
    whole = login(member).get("/search", {"q": "rendering"}, headers=restore).content.decode()
    assert "<html" in whole and 'id="results"' in whole


def test_search_and_status_need_a_login():
    for url in ("/search?q=x", "/status"):
        response = Client().get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_the_nav_links_to_search_and_status(member):
    page = login(member).get("/").content.decode()
    assert 'href="/search"' in page and 'href="/status"' in page


# --- a reply's context --------------------------------------------------------------------

REPORT = {
    "budget": {"window": 8192, "input_limit": 7000, "reply_reserve": 1024},
    "tokens": {
        "system": 120,
        "sections": {"memory": 42, "persona": 17},
        "summary": 0,
        "history": 300,
        "current": 12,
        "tools": 80,
        "total": 554,
    },
    "trigger": {"id": 0, "tokens": 12, "status": "included"},
    "history_columns": ["id", "role", "tokens", "status"],
    "history": [[1, "user", 100, "included"], [2, "assistant", 200, "cut"]],
    "older_dropped": None,
}


@pytest.fixture
def reply(team_chat):
    trigger = say(team_chat, "what did we decide?")
    reply = say(team_chat, "We decided to ship.", role=Message.Role.ASSISTANT)
    turn = Turn.objects.create(
        chat=team_chat,
        trigger=trigger,
        reply=reply,
        status=Turn.Status.COMPLETED,
        model="gemma-test",
        provider="openai-compatible",
        prompt_tokens=554,
        completion_tokens=31,
        iterations=2,
        latency_ms=900,
        prompt_report={**REPORT, "trigger": {**REPORT["trigger"], "id": trigger.pk}},
    )
    reply.metadata = {"turn": turn.pk}
    reply.save(update_fields=["metadata"])
    return reply


def context_url(message):
    return f"{page_url(message.chat)}messages/{message.pk}/context"


def test_context_view_shows_the_turn_and_its_prompt_report(member, reply):
    response = login(member).get(context_url(reply))
    page = response.content.decode()
    assert response.status_code == 200
    assert "gemma-test" in page and "Completed" in page
    assert "554 prompt + 31 completion = 585" in page
    assert "<td>section: memory</td><td>42</td>" in page
    assert "<td>total sent</td><td>554</td>" in page
    assert "Window 8192 tokens, input limit 7000, reply reserve 1024." in page
    assert "<td>included</td><td>1</td>" in page and "<td>cut</td><td>2</td>" in page
    assert f'href="{page_url(reply.chat)}#message-{reply.pk}"' in page


def test_context_view_says_what_a_section_listed_and_left_out(member, reply):
    turn = Turn.objects.get(pk=reply.metadata["turn"])
    turn.prompt_report = {
        **turn.prompt_report,
        "tokens": {**REPORT["tokens"], "sections": {"memory": 42, "skills": 1130}},
        "sections": [
            {"name": "memory", "status": "included", "tokens": 42},
            {
                "name": "skills",
                "status": "cut",
                "tokens": 1130,
                "original_tokens": 1190,
                "details": {"listed": 17, "left_out": 39, "choice": "kept"},
            },
        ],
    }
    turn.save(update_fields=["prompt_report"])
    page = login(member).get(context_url(reply)).content.decode()
    assert "<td>section: memory</td><td>42</td>" in page
    assert (
        "<td>section: skills (cut from 1190; choice kept, left out 39, listed 17)</td><td>1130</td>"
    ) in page


def test_context_view_is_404_for_outsiders(outsider, reply):
    assert login(outsider).get(context_url(reply)).status_code == 404


def test_context_view_is_404_for_messages_without_a_turn(member, team_chat, reply):
    plain = say(team_chat, "I am just a person")
    client = login(member)
    assert client.get(context_url(plain)).status_code == 404
    plain.metadata = {"turn": "not-a-number"}
    plain.save(update_fields=["metadata"])
    assert client.get(context_url(plain)).status_code == 404
    assert client.get(f"{page_url(team_chat)}messages/999999/context").status_code == 404


def test_context_view_does_not_follow_a_turn_of_another_chat(member, team_chat, reply):
    elsewhere = message_ingest(channel="api", chat_id="other", user_id="u", text="hi").message
    chat_member_ensure(chat=elsewhere.chat, person=member)
    forged = say(team_chat, "points elsewhere", role=Message.Role.ASSISTANT)
    foreign_turn = Turn.objects.create(chat=elsewhere.chat, trigger=elsewhere, model="other")
    forged.metadata = {"turn": foreign_turn.pk}
    forged.save(update_fields=["metadata"])
    assert login(member).get(context_url(forged)).status_code == 404


def test_the_context_route_is_named(reply):
    from django.urls import reverse

    url = reverse("message_context", args=[reply.chat.chat_key, reply.pk])
    assert url == context_url(reply)


# --- status -------------------------------------------------------------------------------


def test_status_says_when_no_model_is_configured_and_counts_chats(settings, member, team_chat):
    settings.LLM_PROVIDER = "none"
    settings.LLM_CONTEXT_TOKENS = 4096
    other = message_ingest(channel="api", chat_id="api-1", user_id="u", text="x").chat
    chat_member_ensure(chat=other, person=member)
    message_ingest(channel="api", chat_id="api-2", user_id="u", text="not mine")

    page = login(member).get("/status").content.decode()
    assert "No language model is configured: messages are stored" in page
    assert "notice-warning" in page and "none configured" in page
    assert "4096 tokens" in page
    assert '<span class="badge badge-api">API</span></dt><dd>1</dd>' in page
    assert '<span class="badge badge-web">Web</span></dt><dd>1</dd>' in page
    assert "<dt>All</dt><dd>2</dd>" in page


def test_status_names_the_demo_model_with_its_notice(monkeypatch, member):
    from chats import views_context
    from chats.agent.llm import ProviderInfo

    class Demo:
        info = ProviderInfo(
            name="local",
            model="gemma-3-270m",
            context_tokens=2048,
            supports_tools=False,
            is_demo=True,
            notice="This is the small offline demo model: expect short, simple answers.",
        )

    monkeypatch.setattr(views_context, "provider_info", lambda: Demo().info)
    page = login(member).get("/status").content.decode()
    assert "gemma-3-270m" in page and "offline demo" in page and "2048 tokens" in page
    assert "This is the small offline demo model" in page
    assert "You are not a member of any chat yet." in page


def test_replies_link_to_their_context_view(owner, team_chat):
    from chats.agent.turns import turn_request
    from chats.services import message_append, message_ingest

    asked = message_ingest(channel="web", chat_id="team-room", user_id="o", text="hi").message
    turn = turn_request(message=asked, enqueue=False)
    reply = message_append(
        chat=team_chat, role="assistant", text="hello", metadata={"turn": turn.pk}
    )
    client = Client()
    client.force_login(owner)
    page = client.get(f"/chats/{team_chat.chat_key}/").content.decode()
    link = f"/chats/{team_chat.chat_key}/messages/{reply.pk}/context"
    assert link in page
    assert client.get(link).status_code == 200


# --- opening a search hit -----------------------------------------------------------------


def _many(chat, count, start=0):
    return [say(chat, f"filler {start + n}") for n in range(count)]


def test_a_hit_older_than_the_newest_page_is_on_the_page_it_links_to(member, team_chat):
    hit = say(team_chat, "the old pelican decision")
    _many(team_chat, 120)
    client = login(member)
    plain = client.get(page_url(team_chat)).content.decode()
    assert f'id="message-{hit.pk}"' not in plain  # the newest 50 do not reach it

    page = client.get(page_url(team_chat), {"at": hit.pk}).content.decode()
    assert f'id="message-{hit.pk}"' in page and 'id="jump-notice"' not in page
    assert "filler 119" in page  # still the newest page, extended down to the hit
    older = Message.objects.filter(chat=team_chat, pk__lt=hit.pk).count()
    assert older == 0 or "load-older" in page


def test_a_hit_too_far_back_is_shown_on_its_own_above_the_newest_page(
    member, team_chat, monkeypatch
):
    monkeypatch.setattr("chats.views.JUMP_MAX_MESSAGES", 60)
    hit = say(team_chat, "the ancient pelican decision")
    _many(team_chat, 80)
    page = login(member).get(page_url(team_chat), {"at": hit.pk}).content.decode()
    assert 'id="jump-notice"' in page and "the ancient pelican decision" in page
    assert f'id="message-{hit.pk}"' not in page  # no second element with the message's id
    assert page.count('<article id="message-') == 50  # the newest page as usual


def test_at_names_only_messages_of_this_chat(member, team_chat, outsider):
    other = message_ingest(channel="api", chat_id="elsewhere", user_id="o", text="not yours")
    _many(team_chat, 60)
    page = login(member).get(page_url(team_chat), {"at": other.message.pk}).content.decode()
    assert "not yours" not in page and 'id="jump-notice"' not in page
    for bad in ("abc", "-3", "0", "99999999"):
        assert login(member).get(page_url(team_chat), {"at": bad}).status_code == 200
