import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from chats.models import (
    Actor,
    ApiToken,
    Chat,
    ChatMember,
    Message,
    MessageEdit,
    Turn,
    hash_api_token,
)
from chats.services import (
    api_token_create,
    chat_member_ensure,
    message_ingest,
    message_record_edit,
)

pytestmark = [pytest.mark.django_db, pytest.mark.storage]


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    # Every test here logs people in; the production hasher costs about a second per user.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


MODELS = ("actor", "chat", "chatmember", "message", "messageedit", "turn", "apitoken")


def changelist(model: str) -> str:
    return reverse(f"admin:chats_{model}_changelist")


def change(model: str, pk: int) -> str:
    return reverse(f"admin:chats_{model}_change", args=[pk])


def add_rows(count: int, *, start: int = 0, person=None):
    """`count` chats, each with a member, two messages from two actors and one edit."""
    for n in range(start, start + count):
        first = message_ingest(
            channel="telegram",
            chat_id=f"-100{n}",
            chat_kind="group",
            chat_title=f"Group {n}",
            user_id=f"u{n}",
            user_name=f"User {n}",
            message_id=f"{n}-1",
            text=f"hello {n}",
        ).message
        message_ingest(
            channel="telegram",
            chat_id=f"-100{n}",
            user_id=None,
            role="assistant",
            message_id=f"{n}-2",
            text=f"answer {n}",
            reply_to_message_id=f"{n}-1",
        )
        message_record_edit(message=first, text=f"hello again {n}")
        Turn.objects.create(
            chat=first.chat,
            trigger=first,
            status=Turn.Status.COMPLETED,
            model="fake",
            prompt_report={"history_tokens": n},
        )
        if person is not None:
            chat_member_ensure(chat=first.chat, person=person)
            api_token_create(person=person, name=f"token {n}")


@pytest.fixture
def history(owner):
    add_rows(3, person=owner)
    Actor.objects.filter(external_id="u0").update(person=owner)


def test_superuser_opens_every_changelist_and_change_view(admin_client, history):
    objects = {
        "actor": Actor.objects.first(),
        "chat": Chat.objects.first(),
        "chatmember": ChatMember.objects.first(),
        "message": Message.objects.filter(edits__isnull=False).first(),
        "messageedit": MessageEdit.objects.first(),
        "turn": Turn.objects.first(),
        "apitoken": ApiToken.objects.first(),
    }
    for model in MODELS:
        assert admin_client.get(changelist(model)).status_code == 200, model
        assert admin_client.get(change(model, objects[model].pk)).status_code == 200, model
    assert admin_client.get(reverse("admin:chats_actor_add")).status_code == 200
    assert admin_client.get(reverse("admin:chats_apitoken_add")).status_code == 200


def test_chat_list_shows_message_counts_and_links_to_the_history(admin_client, history):
    chat = Chat.objects.get(external_id="-1001")
    response = admin_client.get(changelist("chat"), {"q": '"Group 1"'})

    assert response.status_code == 200
    rows = list(response.context["cl"].result_list)
    assert [c.chat_key for c in rows] == [chat.chat_key]
    assert rows[0].message_total == 2
    link = f"{changelist('message')}?chat__id__exact={chat.pk}"
    assert link in response.text

    messages = admin_client.get(link)
    assert {m.external_id for m in messages.context["cl"].result_list} == {"1-1", "1-2"}


def test_chat_change_view_shows_its_members_inline(admin_client, history, owner):
    chat = Chat.objects.get(external_id="-1000")
    response = admin_client.get(change("chat", chat.pk))

    assert response.status_code == 200
    assert owner.username in response.text
    assert chat.chat_key in response.text


def test_search_and_filters_narrow_the_lists(admin_client, history, owner):
    def results(model, **params):
        response = admin_client.get(changelist(model), params)
        assert response.status_code == 200
        return list(response.context["cl"].result_list)

    assert [a.display_name for a in results("actor", q='"User 2"')] == ["User 2"]
    assert [a.external_id for a in results("actor", q="u1")] == ["u1"]
    assert [a.external_id for a in results("actor", person__isempty="0")] == ["u0"]
    assert len(results("actor", channel="telegram")) == 3
    assert results("actor", channel="web") == []

    assert {m.external_id for m in results("message", q='"answer 2"')} == {"2-2"}
    assert [m.external_id for m in results("message", q="0-1")] == ["0-1"]  # external id
    assert {m.role for m in results("message", role__exact="assistant")} == {"assistant"}
    assert len(results("message", role__exact="assistant")) == 3
    assert len(results("message", channel="telegram")) == 6
    assert results("message", channel="web") == []
    assert len(results("message", chat__kind__exact="group")) == 6

    assert len(results("chat", kind__exact="group", channel="telegram")) == 3
    assert results("chat", kind__exact="room") == []
    assert [e.new_text for e in results("messageedit", q='"hello again 1"')] == ["hello again 1"]
    assert len(results("chatmember", q=owner.username)) == 3
    assert len(results("apitoken", q='"token 2"')) == 1

    revoked = ApiToken.objects.first()
    revoked.revoked_at = revoked.created_at
    revoked.save()
    assert results("apitoken", state="revoked") == [revoked]
    assert len(results("apitoken", state="active")) == 2


def test_messages_and_edits_cannot_be_added_changed_or_deleted(admin_client, history):
    message = Message.objects.filter(edits__isnull=False).first()
    edit = message.edits.first()
    original = (message.text, message.role)

    assert admin_client.get(reverse("admin:chats_message_add")).status_code == 403
    assert admin_client.post(reverse("admin:chats_message_add"), {}).status_code == 403
    response = admin_client.post(change("message", message.pk), {"text": "rewritten"})
    assert response.status_code == 403
    delete = reverse("admin:chats_message_delete", args=[message.pk])
    assert admin_client.get(delete).status_code == 403
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    listing = admin_client.get(changelist("message"))
    assert "delete_selected" not in listing.text
    admin_client.post(
        changelist("message"),
        {"action": "delete_selected", "_selected_action": [message.pk], "post": "yes"},
    )
    assert admin_client.post(change("messageedit", edit.pk), {}).status_code == 403
    edit_delete = reverse("admin:chats_messageedit_delete", args=[edit.pk])
    assert admin_client.post(edit_delete, {"post": "yes"}).status_code == 403
    turn = Turn.objects.first()
    response = admin_client.post(change("turn", turn.pk), {"status": "running"})
    assert response.status_code == 403

    message.refresh_from_db()
    assert (message.text, message.role) == original
    assert Message.objects.count() == 6 and MessageEdit.objects.count() == 3
    assert Turn.objects.get(pk=turn.pk).status == Turn.Status.COMPLETED

    # The change view shows the message, its edits inline, and no save button.
    page = admin_client.get(change("message", message.pk))
    assert page.status_code == 200
    assert edit.previous_text in page.text and edit.new_text in page.text
    assert 'name="_save"' not in page.text
    assert page.context["has_change_permission"] is False
    assert page.context["has_delete_permission"] is False


def test_adding_an_api_token_shows_the_raw_token_once(admin_client, owner):
    response = admin_client.post(
        reverse("admin:chats_apitoken_add"),
        {"person": owner.pk, "kind": "integration", "name": "ci deploy"},
    )

    assert response.status_code == 200
    raw = re.search(r'<code id="raw-token"[^>]*>([^<]+)</code>', response.text).group(1)
    token = ApiToken.objects.get()
    assert token.person == owner and token.name == "ci deploy"
    assert token.key_hash == hash_api_token(raw) and raw.startswith(token.prefix)
    assert "no-store" in response["Cache-Control"]

    later = [
        admin_client.get(changelist("apitoken")),
        admin_client.get(change("apitoken", token.pk)),
    ]
    assert all(raw not in page.text for page in later)
    assert all(raw not in str(v) for v in admin_client.session.values())


def test_the_revoke_action_revokes_through_the_service(admin_client, owner):
    keep, _ = api_token_create(person=owner, name="keep")
    revoke, _ = api_token_create(person=owner, name="revoke")

    response = admin_client.post(
        changelist("apitoken"),
        {"action": "revoke_tokens", "_selected_action": [revoke.pk]},
        follow=True,
    )

    assert response.status_code == 200
    assert "Revoked 1 API token(s)." in response.text
    revoke.refresh_from_db()
    keep.refresh_from_db()
    assert revoke.revoked_at is not None and keep.revoked_at is None


def test_a_token_never_changes_hands(admin_client, owner, member):
    token, _ = api_token_create(person=owner, name="old name")
    admin_client.post(change("apitoken", token.pk), {"person": member.pk, "name": "new name"})

    token.refresh_from_db()
    assert token.name == "new name" and token.person == owner


def test_actor_admin_links_a_person_and_rejects_bad_ids(admin_client, owner):
    bad = admin_client.post(
        reverse("admin:chats_actor_add"),
        {"channel": "Tele Gram", "external_id": "a\x01b", "display_name": "x"},
    )
    assert bad.status_code == 200
    assert set(bad.context["adminform"].form.errors) == {"channel", "external_id"}

    good = admin_client.post(
        reverse("admin:chats_actor_add"),
        {"channel": "telegram", "external_id": "555", "display_name": "Olivia", "person": owner.pk},
    )
    assert good.status_code == 302
    actor = Actor.objects.get()
    assert actor.person == owner
    # The next Telegram message of user 555 lands on this actor, already linked.
    result = message_ingest(channel="telegram", chat_id=555, user_id=555, text="hi")
    assert result.message.actor == actor


def test_person_autocomplete_for_actors_works(admin_client, owner, member):
    response = admin_client.get(
        reverse("admin:autocomplete"),
        {"app_label": "chats", "model_name": "actor", "field_name": "person", "term": "oliv"},
    )
    assert response.status_code == 200
    assert [r["text"] for r in response.json()["results"]] == [owner.username]


@pytest.mark.parametrize("model", MODELS)
def test_changelists_cost_the_same_number_of_queries_for_many_rows(
    admin_client, owner, model, django_assert_max_num_queries
):
    add_rows(2, person=owner)
    url = changelist(model)
    admin_client.get(url)  # warm up the session and content types

    with CaptureQueriesContext(connection) as few:
        assert admin_client.get(url).status_code == 200
    add_rows(10, start=2, person=owner)
    with django_assert_max_num_queries(len(few)):
        response = admin_client.get(url)
    assert response.status_code == 200
    assert len(response.context["cl"].result_list) >= 10


def test_non_staff_people_are_sent_to_the_admin_login(client, member, history):
    client.force_login(member)
    for model in MODELS:
        response = client.get(changelist(model))
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login"))
