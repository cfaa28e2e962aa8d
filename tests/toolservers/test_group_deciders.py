"""Deciders of a Telegram group and its forum topics: the group's Telegram administrators
who are linked people (read from the fake Bot API when /tools is used), and members staff
named on the dashboard. Everyone else is refused, and nothing in an update gives a role."""

import json
from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from chats.models import ChatKind, ChatMember
from chats.services import actor_get_or_create, chat_get_or_create, chat_member_ensure
from tests.bots.conftest import (
    FORUM_ID,
    GROUP_ID,
    fake_telegram,  # noqa: F401 (the fixture, shared with the bot tests)
    process,
)
from tests.fakes.telegram_server import check_html, group_chat, private_chat, tg_user
from toolservers.models import ChatRoleSource, ChatToolset, GroupRolesRefresh, ToolAudit
from toolservers.policy import may_decide
from toolservers.roles import member_role_set
from toolservers.services import VIA_COMMAND, server_add, server_tools_record

pytestmark = [pytest.mark.storage, pytest.mark.django_db]

ALICE = tg_user(1001, "Alice", username="alice")  # linked; a Telegram administrator
BOB = tg_user(1002, "Bob")  # linked; a plain member of the group
CAROL = tg_user(1003, "Carol")  # a Telegram administrator who never linked an account
DAVE = tg_user(1004, "Dave")  # linked; owns his own DM, not in the group
OPS = group_chat(GROUP_ID, "Ops")
FORUM = group_chat(FORUM_ID, "Forum", forum=True)
GROUP_ANONYMOUS_BOT = {"id": 1087968824, "is_bot": True, "first_name": "Group"}
REFUSED = "Only this chat's deciders"
ADMIN_RIGHTS = {
    "is_anonymous": False,
    **{
        f"can_{right}": True
        for right in [
            "be_edited",
            "manage_chat",
            "delete_messages",
            "manage_video_chats",
            "restrict_members",
            "promote_members",
            "change_info",
            "invite_users",
            "post_stories",
            "edit_stories",
            "delete_stories",
        ]
    },
}


@pytest.fixture
def telegram(fake_telegram, settings):  # noqa: F811
    settings.TELEGRAM_GROUP_TRIGGER = "mention"
    fake_telegram.set_administrators(GROUP_ID, [ALICE, CAROL])
    fake_telegram.set_administrators(FORUM_ID, [ALICE])
    return fake_telegram


@pytest.fixture
def notes():
    server = server_add(
        by=None, via=VIA_COMMAND, slug="notes", transport="http", url="http://127.0.0.1:9/mcp"
    )
    server_tools_record(server=server, announced=[{"name": "read", "description": "Read."}])
    return server


@pytest.fixture
def people(make_person):
    alice, bob, dave = make_person("alice"), make_person("bob"), make_person("dave")
    for user, person in ((ALICE, alice), (BOB, bob), (DAVE, dave)):
        actor_get_or_create(
            channel="telegram", user_id=user["id"], display_name=user["first_name"], person=person
        )
    group, _ = chat_get_or_create(channel="telegram", chat_id=GROUP_ID, kind=ChatKind.GROUP)
    chat_member_ensure(chat=group, person=bob)
    own, _ = chat_get_or_create(channel="telegram", chat_id=1004, kind=ChatKind.DM)
    chat_member_ensure(chat=own, person=dave, role=ChatMember.Role.OWNER)
    return {"alice": alice, "bob": bob, "dave": dave, "group": group, "dm": own}


def say(telegram, user, text, *, chat=OPS, **extra) -> str:
    outcome = process(telegram.message(chat, user, text, **extra))
    shown = []
    for row in outcome.outbound:
        error, visible = check_html(row.payload["text"])
        assert error is None, error
        shown.append(visible)
    return "\n".join(shown)


def role(chat, person) -> str | None:
    return (
        ChatMember.objects.filter(chat=chat, person=person).values_list("role", flat=True).first()
    )


def expire_roles_cache(chat) -> None:
    GroupRolesRefresh.objects.filter(chat=chat).update(
        tried_at=timezone.now() - timedelta(minutes=5)
    )


def test_a_linked_telegram_admin_becomes_a_decider_and_an_unlinked_one_does_not(
    telegram, notes, people
):
    group = people["group"]
    assert not may_decide(group, people["alice"])  # before anything was read from Telegram
    assert "notes is on in this chat" in say(telegram, ALICE, "/tools on notes allow")
    assert role(group, people["alice"]) == ChatMember.Role.ADMIN
    assert ChatRoleSource.objects.get(chat=group, person=people["alice"]).source == "telegram"
    assert may_decide(group, people["alice"])
    assert telegram.calls_of("getChatAdministrators")[0].params == {"chat_id": GROUP_ID}
    # Carol is an administrator on Telegram but nobody on the hub: she decides nothing.
    assert REFUSED in say(telegram, CAROL, "/tools off notes")
    assert ChatToolset.objects.get(chat=group).enabled
    # Read at most once a minute per group, not on every command.
    assert len(telegram.calls_of("getChatAdministrators")) == 1
    audit = ToolAudit.objects.get(action="roles.telegram")
    assert audit.detail == {"promoted": [people["alice"].pk], "demoted": []}


@pytest.mark.parametrize("who", ["member", "linked elsewhere", "stranger", "anonymous admin"])
def test_everyone_else_in_the_group_is_refused(telegram, notes, people, who):
    say(telegram, ALICE, "/tools on notes")
    sender, extra = {
        "member": (BOB, {}),
        "linked elsewhere": (DAVE, {}),
        "stranger": (tg_user(6666, "Mallory"), {}),
        # An admin posting "as the group": Telegram hides who it is, so it is nobody.
        "anonymous admin": (GROUP_ANONYMOUS_BOT, {"extra": {"sender_chat": OPS}}),
    }[who]
    assert REFUSED in say(telegram, sender, "/tools off notes", **extra)
    assert ChatToolset.objects.get(chat=people["group"]).enabled
    assert not may_decide(people["group"], people["bob"])
    assert not may_decide(people["group"], people["dave"])
    # Dave still decides in his own private chat.
    assert "notes is on" in say(telegram, DAVE, "/tools on notes", chat=private_chat(DAVE))


def test_an_outsider_is_refused_on_the_dashboard(telegram, client, notes, people, make_person):
    say(telegram, ALICE, "/tools on notes")
    outsider = make_person("oscar")
    client.force_login(outsider)
    key = people["group"].chat_key
    assert client.get(f"/chats/{key}/tools").status_code == 404
    data = {"server": "notes", "enabled": "0"}
    assert client.post(f"/chats/{key}/tools/set", data).status_code == 404
    named = client.post(f"/chats/{key}/tools/roles", {"person": outsider.pk, "role": "admin"})
    assert named.status_code == 404
    assert role(people["group"], outsider) is None and not may_decide(people["group"], outsider)
    # Bob, a plain member, reads the page but changes nothing and names nobody.
    client.force_login(people["bob"])
    assert client.get(f"/chats/{key}/tools").status_code == 200
    assert client.post(f"/chats/{key}/tools/set", data).status_code == 403
    named = client.post(f"/chats/{key}/tools/roles", {"person": people["bob"].pk, "role": "admin"})
    assert named.status_code == 403
    assert role(people["group"], people["bob"]) == ChatMember.Role.MEMBER
    assert ChatToolset.objects.get(chat=people["group"]).enabled


def test_demotion_on_telegram_removes_the_role_at_the_next_refresh(telegram, notes, people):
    group = people["group"]
    say(telegram, ALICE, "/tools on notes")
    assert may_decide(group, people["alice"])
    telegram.set_administrators(GROUP_ID, [CAROL])  # Alice lost her rights on Telegram
    assert "notes is off" in say(telegram, ALICE, "/tools off notes")  # cached: not read yet
    expire_roles_cache(group)
    assert REFUSED in say(telegram, ALICE, "/tools on notes")
    assert role(group, people["alice"]) == ChatMember.Role.MEMBER  # still in the group
    assert not ChatRoleSource.objects.filter(chat=group, person=people["alice"]).exists()
    assert not ChatToolset.objects.get(chat=group).enabled


def test_roles_staff_set_by_hand_survive_every_refresh(telegram, notes, people, make_person):
    group = people["group"]
    staff = make_person("stella", is_staff=True)
    say(telegram, ALICE, "/tools")
    with pytest.raises(PermissionDenied):  # a Telegram admin does not name other admins
        member_role_set(by=people["alice"], chat=group, person_id=people["bob"].pk, role="admin")
    member_role_set(by=staff, chat=group, person_id=people["bob"].pk, role="admin")
    member_role_set(by=staff, chat=group, person_id=people["alice"].pk, role="member")
    with pytest.raises(ValidationError):  # a DM has its one person, no admins
        member_role_set(by=staff, chat=people["dm"], person_id=people["dave"].pk, role="admin")
    expire_roles_cache(group)
    say(telegram, BOB, "/tools")  # Telegram still lists Alice, never Bob
    assert telegram.calls_of("getChatAdministrators")[1:]
    assert role(group, people["bob"]) == ChatMember.Role.ADMIN
    assert role(group, people["alice"]) == ChatMember.Role.MEMBER
    assert "notes is on" in say(telegram, BOB, "/tools on notes")
    assert REFUSED in say(telegram, ALICE, "/tools off notes")
    audit = ToolAudit.objects.filter(action="role.set").first()
    assert (audit.person, audit.detail["role"]) == (staff, "member")


def test_a_bot_api_failure_keeps_the_last_roles_and_says_so(telegram, notes, people):
    group = people["group"]
    say(telegram, ALICE, "/tools")
    expire_roles_cache(group)
    telegram.fail_next("getChatAdministrators", status=502, description="Bad Gateway")
    shown = say(telegram, ALICE, "/tools on notes")
    assert "notes is on in this chat" in shown
    assert "could not read this group's administrators" in shown and "still apply" in shown
    assert role(group, people["alice"]) == ChatMember.Role.ADMIN
    assert "Bad Gateway" in GroupRolesRefresh.objects.get(chat=group).error
    assert telegram.token not in GroupRolesRefresh.objects.get(chat=group).error


def test_a_first_reading_that_fails_leaves_only_staff_deciding(telegram, notes, people):
    telegram.fail_next("getChatAdministrators", status=500, description="Internal")
    shown = say(telegram, ALICE, "/tools on notes")
    assert REFUSED in shown and "only staff decide here" in shown
    assert role(people["group"], people["alice"]) is None


def test_a_forum_topic_shares_its_groups_deciders(telegram, notes, people):
    say(telegram, ALICE, "hello", chat=FORUM, thread_id=77)  # the topic's chat exists
    shown = say(telegram, ALICE, "/tools on notes", chat=FORUM, thread_id=77)
    assert "notes is on in this chat" in shown
    topic = ChatToolset.objects.get().chat
    assert topic.kind == ChatKind.TOPIC
    group = ChatRoleSource.objects.get(person=people["alice"]).chat
    assert group.kind == ChatKind.GROUP and group.external_id == str(FORUM_ID)
    assert may_decide(topic, people["alice"])
    # Bob writes in the topic (a plain member there): refused.
    say(telegram, BOB, "hello", chat=FORUM, thread_id=77)
    assert role(topic, people["bob"]) == ChatMember.Role.MEMBER
    assert REFUSED in say(telegram, BOB, "/tools off notes", chat=FORUM, thread_id=77)
    # In another topic of the forum, Alice decides and Bob does not.
    say(telegram, BOB, "hi", chat=FORUM, thread_id=78)
    assert REFUSED in say(telegram, BOB, "/tools on notes", chat=FORUM, thread_id=78)
    assert "notes is on" in say(telegram, ALICE, "/tools on notes", chat=FORUM, thread_id=78)
    assert ChatToolset.objects.count() == 2


def test_a_forged_update_cannot_promote_anyone(telegram, client, notes, people, settings):
    group = people["group"]
    say(telegram, ALICE, "/tools")
    # Telegram's own notice that Bob became an administrator, as a forger would write it:
    # the bridge does not even ask for chat_member updates, and roles come from the Bot API.
    forged = {
        "chat_member": {
            "chat": OPS,
            "from": ALICE,
            "date": 1,
            "old_chat_member": {"status": "member", "user": BOB},
            "new_chat_member": {"status": "administrator", "user": BOB, **ADMIN_RIGHTS},
        }
    }
    assert process(telegram.push(forged)).result.startswith("ignored")
    # Someone posing as Alice (her name and username, another account) is not Alice.
    impostor = tg_user(6667, "Alice", username="alice")
    expire_roles_cache(group)
    assert REFUSED in say(telegram, impostor, "/tools off notes")
    assert REFUSED in say(telegram, BOB, "/tools on notes")
    # A webhook delivery without Telegram's secret is refused before anything is read.
    settings.TELEGRAM_WEBHOOK_SECRET = "s3cret"
    update = telegram.message(OPS, ALICE, "/tools on notes")
    response = client.post(
        "/telegram/webhook",
        data=json.dumps(update),
        content_type="application/json",
        headers={"X-Telegram-Bot-Api-Secret-Token": "guess"},
    )
    assert response.status_code == 403
    assert role(group, people["bob"]) == ChatMember.Role.MEMBER
    assert not ChatToolset.objects.exists()


def test_staff_name_and_unname_admins_on_the_chats_tools_page(client, notes, people, make_person):
    group, bob = people["group"], people["bob"]
    client.force_login(make_person("stella", is_staff=True))
    page = client.get(f"/chats/{group.chat_key}/tools")
    assert b"Who decides here" in page.content and b"Name admin" in page.content
    response = client.post(
        f"/chats/{group.chat_key}/tools/roles", {"person": bob.pk, "role": "admin"}
    )
    assert response.status_code == 302 and may_decide(group, bob)
    assert b"named by staff" in client.get(f"/chats/{group.chat_key}/tools").content
    client.post(f"/chats/{group.chat_key}/tools/roles", {"person": bob.pk, "role": "member"})
    assert not may_decide(group, bob)
    # Someone who is not in the chat cannot be named, and an unknown role is refused.
    dave = people["dave"]
    refused = client.post(
        f"/chats/{group.chat_key}/tools/roles", {"person": dave.pk, "role": "admin"}
    )
    assert refused.status_code == 400 and role(group, dave) is None
    owner = client.post(f"/chats/{group.chat_key}/tools/roles", {"person": bob.pk, "role": "owner"})
    assert owner.status_code == 400 and role(group, bob) == ChatMember.Role.MEMBER
