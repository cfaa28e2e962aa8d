"""The server-rendered dashboard: chat list, chat page, composer, members panel."""

import uuid

import pytest

from chats.models import Chat, ChatMember, Message, Turn
from chats.services import chat_member_ensure, chat_reset, message_ingest
from tests.chats.dashboard_helpers import login, page_url, say

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


# --- chat list ----------------------------------------------------------------------------


def test_chat_list_links_every_chat_with_its_last_message_without_n_plus_1(
    owner, team_chat, django_assert_max_num_queries
):
    say(team_chat, "first words")
    say(team_chat, "the latest **news**", user="bo", name="Bo")
    others = []
    for index in range(5):
        result = message_ingest(
            channel="api", chat_id=f"conv-{index}", user_id="u", text=f"api message {index}"
        )
        chat_member_ensure(chat=result.chat, person=owner)
        others.append(result.chat)
    client = login(owner)
    # session, user, provider info, the person's own notices, chats: not per row
    with django_assert_max_num_queries(7):
        page = client.get("/").content.decode()
    assert f'href="{page_url(team_chat)}"' in page
    assert "Bo:</span> the latest **news**" in page
    assert "first words" not in page
    for chat in others:
        assert f'href="{page_url(chat)}"' in page
    assert '<time datetime="' in page


def test_creating_a_room_makes_its_creator_the_owner_and_opens_it(owner):
    response = login(owner).post("/rooms/", {"title": "Launch planning"})
    chat = Chat.objects.get(title="Launch planning")
    assert response.status_code == 302 and response["Location"] == page_url(chat)
    assert chat.channel == "web" and chat.kind == "room"
    assert chat.chat_key.startswith("web:") and len(chat.external_id) == 32
    assert ChatMember.objects.get(chat=chat, person=owner).role == ChatMember.Role.OWNER


def test_a_room_needs_a_title(owner):
    response = login(owner).post("/rooms/", {"title": "  "})
    assert response.status_code == 400
    assert not Chat.objects.exists()


# --- chat page ----------------------------------------------------------------------------


def test_chat_page_shows_authors_markdown_and_inert_html(settings, member, team_chat):
    settings.AGENT_NAME = "Hermes"
    say(team_chat, "Hello **team** <script>alert(1)</script><img src=x onerror=alert(2)>")
    say(team_chat, "Partial answer", role=Message.Role.ASSISTANT, metadata={"interrupted": True})
    say(team_chat, "42", role=Message.Role.TOOL, metadata={"tool_name": "calc", "duration_ms": 7})
    chat_reset(chat=team_chat)
    page = login(member).get(page_url(team_chat)).content.decode()
    assert "<code>calc</code> done · 7 ms" in page
    assert "Ana" in page and "Hermes" in page
    assert "<strong>team</strong>" in page
    assert "<script>alert(1)" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)" in page  # shown as text, never run
    assert "interrupted</span>" in page
    assert "— new context —" in page
    message = Message.objects.filter(chat=team_chat).first()
    assert f'id="message-{message.pk}" data-id="{message.pk}"' in page
    assert 'hx-post="' in page and 'name="client_id"' in page
    assert f'data-ws-path="/ws/chats/{team_chat.chat_key}/"' in page


def test_chat_page_shows_the_newest_page_and_htmx_loads_the_older_one(member, team_chat):
    ids = [say(team_chat, f"message number {n}").pk for n in range(55)]
    client = login(member)
    page = client.get(page_url(team_chat)).content.decode()
    assert f'id="message-{ids[5]}"' in page and f'id="message-{ids[4]}"' not in page
    assert f"?before={ids[5]}" in page

    older = client.get(page_url(team_chat), {"before": ids[5]}, headers=HTMX)
    body = older.content.decode()
    assert older.status_code == 200
    assert "<html" not in body and 'id="composer"' not in body
    assert [f'id="message-{i}"' in body for i in ids[:6]] == [True] * 5 + [False]
    assert "Load older" not in body  # nothing older than the first message


@pytest.mark.parametrize("who", ["outsider", "unknown chat"])
def test_outsiders_and_unknown_chats_get_the_same_404(outsider, team_chat, who):
    message = say(team_chat, "private")
    client = login(outsider)
    base = page_url(team_chat) if who == "outsider" else "/chats/web:nope/"
    assert client.get(base).status_code == 404
    assert client.get(f"{base}messages/{message.pk}").status_code == 404
    assert client.post(f"{base}messages", {"text": "hi"}).status_code == 404
    assert client.post(f"{base}members", {"username": "oscar"}).status_code == 404
    assert client.post(f"{base}members/{outsider.pk}/remove").status_code == 404
    assert Message.objects.count() == 1 and not ChatMember.objects.filter(person=outsider)


def test_one_message_renders_alone_for_members(member, team_chat):
    message = say(team_chat, "just *this*")
    response = login(member).get(f"{page_url(team_chat)}messages/{message.pk}", headers=HTMX)
    body = response.content.decode()
    assert response.status_code == 200 and "<html" not in body
    assert body.strip().startswith(f'<article id="message-{message.pk}"')
    assert "<em>this</em>" in body


def test_a_message_of_another_chat_is_not_found_through_this_one(member, team_chat):
    other = message_ingest(channel="api", chat_id="elsewhere", user_id="u", text="x").message
    chat_member_ensure(chat=other.chat, person=member)
    response = login(member).get(f"{page_url(team_chat)}messages/{other.pk}")
    assert response.status_code == 404


# --- composer -----------------------------------------------------------------------------


def test_posting_stores_the_message_once_per_client_id_and_requests_a_turn(member, team_chat):
    member.first_name, member.last_name = "Marco", "Rossi"
    member.save()
    client = login(member)
    client_id = str(uuid.uuid4())
    url = f"{page_url(team_chat)}messages"
    first = client.post(url, {"text": "Plan the *launch*", "client_id": client_id}, headers=HTMX)
    again = client.post(url, {"text": "Plan the *launch*", "client_id": client_id}, headers=HTMX)

    message = Message.objects.get(chat=team_chat)
    assert first.status_code == 201 and again.status_code == 200
    assert first.content.decode().strip().startswith(f'<article id="message-{message.pk}"')
    assert "<em>launch</em>" in first.content.decode() and "Marco Rossi" in first.content.decode()
    assert message.external_id == client_id and message.actor.channel == "web"
    assert message.actor.external_id == str(member.pk) and message.actor.person == member
    turn = Turn.objects.get(chat=team_chat)
    assert turn.trigger == message and turn.status == Turn.Status.QUEUED


def test_posting_without_a_client_id_still_works_and_without_htmx_redirects(member, team_chat):
    response = login(member).post(f"{page_url(team_chat)}messages", {"text": "plain form"})
    message = Message.objects.get(chat=team_chat)
    assert response.status_code == 302
    assert response["Location"] == f"{page_url(team_chat)}#message-{message.pk}"


def test_an_empty_message_is_refused_and_nothing_is_stored(member, team_chat):
    response = login(member).post(
        f"{page_url(team_chat)}messages",
        {"text": "   ", "client_id": str(uuid.uuid4())},
        headers=HTMX,
    )
    assert response.status_code == 400
    assert 'id="composer-error"' in response.content.decode()
    assert response["HX-Retarget"] == "#composer-error"
    assert not Message.objects.exists() and not Turn.objects.exists()


def test_chats_of_other_channels_show_a_disabled_composer_and_refuse_posts(member):
    chat = message_ingest(channel="telegram", chat_id=-42, chat_kind="group", user_id=7, text="hi")
    chat = chat.chat
    chat_member_ensure(chat=chat, person=member)
    client = login(member)
    page = client.get(page_url(chat)).content.decode()
    assert 'id="composer"' not in page and "disabled" in page and "web rooms only" in page
    assert client.post(f"{page_url(chat)}messages", {"text": "from the web"}).status_code == 403
    assert Message.objects.count() == 1


def test_posts_need_a_csrf_token(member, team_chat):
    client = login(member, enforce_csrf_checks=True)
    response = client.post(f"{page_url(team_chat)}messages", {"text": "hi"}, headers=HTMX)
    assert response.status_code == 403
    assert not Message.objects.exists()
    token = client.get(page_url(team_chat)).context["csrf_token"]
    headers = HTMX | {"X-CSRFToken": str(token)}
    response = client.post(f"{page_url(team_chat)}messages", {"text": "hi"}, headers=headers)
    assert response.status_code == 201


# --- members ------------------------------------------------------------------------------


def test_owners_see_and_manage_members_members_cannot(owner, member, outsider, team_chat):
    assert 'id="members"' in login(owner).get(page_url(team_chat)).content.decode()
    assert 'id="members"' not in login(member).get(page_url(team_chat)).content.decode()

    as_member = login(member)
    assert as_member.post(f"{page_url(team_chat)}members", {"username": "oscar"}).status_code == 403
    remove_owner = f"{page_url(team_chat)}members/{owner.pk}/remove"
    assert as_member.post(remove_owner).status_code == 403

    as_owner = login(owner)
    added = as_owner.post(f"{page_url(team_chat)}members", {"username": "oscar"}, headers=HTMX)
    assert added.status_code == 200 and "oscar" in added.content.decode()
    assert ChatMember.objects.get(chat=team_chat, person=outsider).role == ChatMember.Role.MEMBER
    assert login(outsider).get(page_url(team_chat)).status_code == 200

    removed = as_owner.post(f"{page_url(team_chat)}members/{outsider.pk}/remove", headers=HTMX)
    assert removed.status_code == 200 and "oscar" not in removed.content.decode()
    assert login(outsider).get(page_url(team_chat)).status_code == 404


def test_adding_an_unknown_username_says_so(owner, team_chat):
    response = login(owner).post(f"{page_url(team_chat)}members", {"username": "nobody"})
    assert response.status_code == 400 and "Nobody is called" in response.content.decode()


def test_the_last_owner_cannot_be_removed_and_admins_cannot_remove_owners(
    owner, member, make_person, team_chat
):
    admin = make_person("ada")
    chat_member_ensure(chat=team_chat, person=admin, role=ChatMember.Role.ADMIN)
    remove_owner = f"{page_url(team_chat)}members/{owner.pk}/remove"
    assert login(admin).post(remove_owner).status_code == 403

    response = login(owner).post(remove_owner, headers=HTMX)
    assert response.status_code == 400 and "last owner" in response.content.decode()
    assert ChatMember.objects.filter(chat=team_chat, person=owner).exists()

    removed = login(admin).post(f"{page_url(team_chat)}members/{member.pk}/remove")
    assert removed.status_code == 302
    assert not ChatMember.objects.filter(chat=team_chat, person=member).exists()


def test_a_second_owner_can_leave(owner, make_person, team_chat):
    other = make_person("otto")
    chat_member_ensure(chat=team_chat, person=other, role=ChatMember.Role.OWNER)
    response = login(other).post(f"{page_url(team_chat)}members/{other.pk}/remove", headers=HTMX)
    assert response.status_code == 200 and response["HX-Redirect"] == "/"
    assert not ChatMember.objects.filter(chat=team_chat, person=other).exists()


def test_member_changes_need_a_csrf_token(owner, outsider, team_chat):
    client = login(owner, enforce_csrf_checks=True)
    response = client.post(f"{page_url(team_chat)}members", {"username": "oscar"})
    assert response.status_code == 403
    assert not ChatMember.objects.filter(person=outsider).exists()
