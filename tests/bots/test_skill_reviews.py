"""Skill proposals decided by Telegram buttons, at the service level: who gets the message and
what it shows, and a press decides only as a linked, active skill reviewer in their own
private chat, on the version the message showed."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group

from bots.models import OutboundMessage
from bots.skill_reviews import CUT_NOTE, prompt_text
from chats.models import ChatKind
from chats.services import actor_get_or_create, chat_get_or_create, chat_member_ensure
from skills.format import content_hash, parse_skill_md
from skills.models import Skill, SkillEvent, SkillProposal
from skills.services import Author, skill_create, skill_delete, skill_edit, skill_patch
from tests.bots.conftest import GROUP_ID, process
from tests.fakes.telegram_server import (
    BotMessage,
    FakeTelegram,
    check_html,
    group_chat,
    tg_user,
    utf16_len,
)
from tests.skills.conftest import make_team
from tests.skills.helpers import BODY, skill_md

pytestmark = [pytest.mark.storage, pytest.mark.django_db]

STELLA = tg_user(1001, "Stella")  # staff, linked
GRETA = tg_user(1002, "Greta")  # in the skill reviewers group, linked
MARCO = tg_user(1003, "Marco")  # linked, no reviewer: the author
NOBODY = tg_user(1004, "Nadia")  # allowed on Telegram, never linked
FRED = tg_user(1005, "Fred")  # linked staff, deactivated
BUILDER = FakeTelegram()  # not started: it builds updates with fresh update ids


@pytest.fixture(autouse=True)
def telegram(settings):
    settings.TELEGRAM_BOT_TOKEN = "7654321:TEST"
    settings.TELEGRAM_ALLOWED_USERS = ["1001", "1002", "1003", "1004", "1005"]
    settings.TELEGRAM_ALLOWED_CHATS = [str(GROUP_ID)]


def linked(user, person):
    return actor_get_or_create(
        channel="telegram", user_id=user["id"], display_name=user["first_name"], person=person
    )


@pytest.fixture
def people(make_person, settings):
    stella = make_person("stella", is_staff=True)
    greta = make_person("greta")
    greta.groups.add(Group.objects.create(name=settings.SKILLS_REVIEWERS_GROUP))
    marco = make_person("marco")
    fred = make_person("fred", is_staff=True, is_active=False)
    make_person("sam", is_staff=True)  # a reviewer without Telegram: nothing to send
    linked(STELLA, stella)
    linked(GRETA, greta)
    linked(MARCO, marco)
    linked(FRED, fred)
    actor_get_or_create(channel="telegram", user_id=NOBODY["id"], display_name="Nadia")
    return {"stella": stella, "greta": greta, "marco": marco, "fred": fred}


def author(person, *, kind=ChatKind.GROUP, title="Ops"):
    chat_id = "-1002" if kind == ChatKind.GROUP else "1003"
    chat, _ = chat_get_or_create(channel="telegram", chat_id=chat_id, kind=kind, title=title)
    actor = actor_get_or_create(channel="telegram", user_id="1003", display_name="Marco")
    return Author(actor=actor, person=person, chat=chat, reason="the image build got faster")


@pytest.fixture
def skill(people):
    own = author(people["marco"], kind=ChatKind.DM, title="Marco")
    return make_team(skill_create(name="deploy-staging", content=skill_md(), author=own).skill)


@pytest.fixture
def proposal(skill, people, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        outcome = skill_patch(
            name="deploy-staging",
            old_string="make image",
            new_string="make image-fast",
            author=author(people["marco"]),
        )
    assert outcome.code == "proposed"
    return outcome.proposal


def sent() -> dict[int, OutboundMessage]:
    return {row.telegram_chat_id: row for row in OutboundMessage.objects.filter(kind="send")}


def bot_message(row: OutboundMessage, chat: dict | None = None) -> BotMessage:
    if chat is not None:
        BUILDER._chats[chat["id"]] = chat
    return BotMessage(
        chat_id=chat["id"] if chat else row.telegram_chat_id,
        message_id=900,
        text=row.payload["text"],
        parse_mode="HTML",
        thread_id=None,
        reply_to=None,
        reply_markup=row.payload.get("reply_markup"),
        sent_at=0,
    )


def data_of(row: OutboundMessage, button: int = 0) -> str:
    return row.payload["reply_markup"]["inline_keyboard"][0][button]["callback_data"]


def press(user, row, data, chat=None):
    return process(BUILDER.press(user, bot_message(row, chat), data))


def visible(text: str) -> str:
    error, shown = check_html(text)
    assert error is None, error
    assert utf16_len(shown) <= 4096
    return shown


def kinds(outcome) -> list[str]:
    return [row.kind for row in outcome.outbound]


def test_each_linked_skill_reviewer_gets_the_change_and_buttons_in_private(proposal):
    rows = sent()
    # Staff and the reviewers group; not the author, the unlinked, the deactivated.
    assert set(rows) == {1001, 1002}
    shown = visible(rows[1001].payload["text"])
    assert "Skill change: patch deploy-staging" in shown
    assert "Proposed by marco" in shown and "Why: the image build got faster" in shown
    assert "Based on version 1." in shown
    assert "-     make image\n+     make image-fast" in shown
    assert "<pre>" in rows[1001].payload["text"]
    assert [data_of(rows[1001], 0), data_of(rows[1001], 1)] == [
        f"skl:{proposal.pk}:1:a",
        f"skl:{proposal.pk}:1:r",
    ]
    assert all(len(data_of(row).encode()) <= 64 for row in rows.values())


def test_the_source_chat_title_is_shown_only_to_reviewers_who_may_read_it(proposal, people):
    assert "Ops" not in visible(sent()[1001].payload["text"])
    chat_member_ensure(chat=proposal.source_chat, person=people["stella"])
    proposal.refresh_from_db()
    assert "Proposed by marco in “Ops”" in visible(prompt_text(proposal, reviewer=people["stella"]))
    assert "Ops" not in visible(prompt_text(proposal, reviewer=people["greta"]))


def test_a_reviewer_approves_by_button_and_the_message_shows_the_outcome(proposal, people):
    row = sent()[1001]
    approved = press(STELLA, row, data_of(row, 0))
    assert approved.result == "skills:approve"
    skill = Skill.objects.get()
    assert skill.current_version.number == 2
    assert "make image-fast" in skill.current_version.skill_md
    event = SkillEvent.objects.get(kind="approved")
    assert (event.via, event.person) == ("telegram", people["stella"])
    edit = next(r for r in approved.outbound if r.kind == "edit")
    assert "✅ Approved by Stella: deploy-staging is now at version 2." in visible(
        edit.payload["text"]
    )
    assert "reply_markup" not in edit.payload and edit.payload["message_id"] == 900

    # Greta's copy of the same request: already decided, said so, and her message updated.
    other = sent()[1002]
    late = press(GRETA, other, data_of(other, 1))
    assert late.result == "skills:conflict"
    edit = next(r for r in late.outbound if r.kind == "edit")
    assert "Already decided: approved by stella." in visible(edit.payload["text"])
    assert SkillProposal.objects.get().status == "approved"


def test_a_reviewer_rejects_and_the_skill_stays(proposal):
    row = sent()[1002]
    rejected = press(GRETA, row, data_of(row, 1))
    assert rejected.result == "skills:reject"
    assert SkillProposal.objects.get().status == "rejected"
    assert Skill.objects.get().current_version.number == 1
    edit = next(r for r in rejected.outbound if r.kind == "edit")
    assert "✖️ Rejected by Greta: deploy-staging stays at version 1." in visible(
        edit.payload["text"]
    )


def test_outsiders_and_the_deactivated_decide_nothing(proposal, people):
    row = sent()[1001]
    approve = data_of(row, 0)
    # A linked person who is no reviewer, an unlinked user, a deactivated staff member, each
    # pressing in their own private chat with the data of a real button.
    for user, expected in ((MARCO, "not allowed"), (NOBODY, "not linked"), (FRED, "not allowed")):
        own_chat = {"id": user["id"], "type": "private", "first_name": user["first_name"]}
        outcome = press(user, row, approve, chat=own_chat)
        assert outcome.result == f"skills:{expected}"
        assert kinds(outcome) == ["answer"]  # nothing is edited either
    # A reviewer deactivated after the message went out decides nothing with it.
    people["stella"].is_active = False
    people["stella"].save()
    assert press(STELLA, row, approve).result == "skills:not allowed"
    assert SkillProposal.objects.get().status == "pending"
    assert not SkillEvent.objects.filter(kind__in=["approved", "rejected"]).exists()


def test_a_press_in_a_group_decides_nothing_even_by_a_reviewer(proposal):
    row = sent()[1001]
    outcome = press(STELLA, row, data_of(row, 0), chat=group_chat(GROUP_ID, "Ops"))
    assert outcome.result == "skills:not private"
    assert kinds(outcome) == ["answer"]
    assert outcome.outbound[0].telegram_chat_id == GROUP_ID
    assert SkillProposal.objects.get().status == "pending"


def test_a_press_names_no_reviewer_only_the_presser_counts(proposal, people):
    row = sent()[1001]
    # Forged data with extra fields (a person id, say) is not a button of ours.
    assert press(STELLA, row, f"skl:{proposal.pk}:1:a:{people['greta'].pk}").result == (
        "callback:unknown"
    )
    assert press(STELLA, row, "skl:abc:1:a").result == "callback:unknown"
    assert press(STELLA, row, "skl:99999999:1:a").result == "skills:unknown"
    assert SkillProposal.objects.get().status == "pending"
    press(GRETA, sent()[1002], data_of(sent()[1002], 0))
    assert SkillProposal.objects.get().decided_by == people["greta"]


def test_a_button_of_an_older_version_answers_so_and_edits_the_message(proposal, people):
    row = sent()[1001]
    # Meanwhile the skill moved on: Stella (a skill reviewer) edited it in her own chat.
    chat, _ = chat_get_or_create(channel="telegram", chat_id=STELLA["id"], kind=ChatKind.DM)
    own = Author(actor=linked(STELLA, people["stella"]), person=people["stella"], chat=chat)
    content = skill_md(body=BODY + "4. Tell the channel.\n")
    assert skill_edit(name="deploy-staging", content=content, author=own).code == "applied"

    stale = press(STELLA, row, data_of(row, 0))
    assert stale.result == "skills:stale"
    answer = next(r for r in stale.outbound if r.kind == "answer")
    assert "Out of date" in answer.payload["text"]
    edit = next(r for r in stale.outbound if r.kind == "edit")
    assert "changed since this was proposed (it is at version 2 now)" in visible(
        edit.payload["text"]
    )
    assert SkillProposal.objects.get().status == "superseded"
    assert "make image-fast" not in Skill.objects.get().current_version.skill_md


def test_a_button_of_an_expired_change_says_so_and_applies_nothing(proposal):
    from skills.tasks import expire_proposals

    SkillProposal.objects.filter(pk=proposal.pk).update(
        created_at=proposal.created_at - timedelta(days=60)
    )
    assert expire_proposals() == 1
    row = sent()[1001]
    outcome = press(STELLA, row, data_of(row, 0))
    edit = next(r for r in outcome.outbound if r.kind == "edit")
    assert "⌛ Expired: nobody decided this change of deploy-staging in time." in visible(
        edit.payload["text"]
    )
    assert SkillProposal.objects.get().status == "expired"
    assert "make image-fast" not in Skill.objects.get().current_version.skill_md


def test_data_naming_another_version_than_the_proposal_decides_nothing(proposal):
    row = sent()[1001]
    outcome = press(STELLA, row, f"skl:{proposal.pk}:7:a")
    assert outcome.result == "skills:stale" and kinds(outcome) == ["answer"]
    outcome = press(STELLA, row, f"skl:{proposal.pk}:0:a")
    assert outcome.result == "skills:stale"
    assert SkillProposal.objects.get().status == "pending"


def test_a_new_skill_is_version_0_on_its_button(people, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        outcome = skill_create(
            name="rotate-keys",
            content=skill_md(name="rotate-keys", description="Rotate the API keys."),
            author=author(people["marco"]),
            category="security",
        )
    row = sent()[1001]
    assert data_of(row) == f"skl:{outcome.proposal.pk}:0:a"
    shown = visible(row.payload["text"])
    assert "create a new skill rotate-keys" in shown and "Category: security" in shown
    assert "A new skill." in shown and "+ description: Rotate the API keys." in shown
    approved = press(STELLA, row, data_of(row))
    edit = next(r for r in approved.outbound if r.kind == "edit")
    assert "rotate-keys is now at version 1." in visible(edit.payload["text"])


def test_an_archive_proposal_says_so_and_archives(
    skill, people, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        skill_delete(name="deploy-staging", author=author(people["marco"]))
    row = sent()[1002]
    assert "Approving archives it" in visible(row.payload["text"])
    approved = press(GRETA, row, data_of(row))
    edit = next(r for r in approved.outbound if r.kind == "edit")
    assert "deploy-staging is archived." in visible(edit.payload["text"])
    assert Skill.objects.get().status == "archived"


def test_a_proposal_of_a_background_review_says_after_which_turn(
    skill, people, django_capture_on_commit_callbacks
):
    from chats.agent.registry import ORIGIN_REVIEW
    from learning.models import Review

    source = author(people["marco"])
    review = Review.objects.create(chat=source.chat, turn_number=12, focus="skills")
    by_review = Author(
        actor=source.actor, chat=source.chat, origin=ORIGIN_REVIEW, review_id=review.pk
    )
    with django_capture_on_commit_callbacks(execute=True):
        skill_patch(
            name="deploy-staging", old_string="make image", new_string="make img", author=by_review
        )
    assert "Proposed by the review after turn 12" in visible(sent()[1001].payload["text"])


def hostile_proposal(skill, marco, **fields):
    """A pending proposal stored as it is (the scanner would refuse it today, an older one
    may still wait): what a reviewer is shown must stay inert and readable."""
    text = skill_md(body=BODY + "Use </pre><b>bold</b> here\u200b now &amp; <a href=x>x</a>\n")
    defaults = {
        "skill": skill,
        "slug": skill.slug,
        "action": "edit",
        "base_number": 1,
        "skill_md": text,
        "front_matter": parse_skill_md(text).front_matter,
        "files": {},
        "author_person": marco,
        "reason": "Because </pre><b>I</b> said\u200b so",
    }
    defaults.update(fields)
    # The content's own hash, as stored proposals have: diffs are cached by it.
    defaults["content_hash"] = content_hash(defaults["skill_md"], defaults["files"])
    return SkillProposal.objects.create(**defaults)


def test_hostile_text_is_escaped_and_hidden_characters_are_shown(skill, people):
    from bots.skill_reviews import skill_proposal_notify

    proposal = hostile_proposal(skill, people["marco"])
    skill_proposal_notify(proposal=proposal)
    text = sent()[1001].payload["text"]
    shown = visible(text)  # Telegram's HTML parser accepts it
    assert "+ Use </pre><b>bold</b> here⟦U+200B⟧ now" in shown
    assert "&lt;/pre&gt;&lt;b&gt;bold&lt;/b&gt; here⟦U+200B⟧ now &amp;amp; &lt;a href=x&gt;" in text
    assert "Why: Because </pre><b>I</b> said⟦U+200B⟧ so" in shown
    assert "\u200b" not in text and text.count("<pre>") == 1 and text.count("</pre>") == 1


def test_approving_a_change_the_scanner_blocks_rejects_it_and_says_so(skill, people):
    from bots.skill_reviews import skill_proposal_notify

    proposal = hostile_proposal(skill, people["marco"])
    skill_proposal_notify(proposal=proposal)
    row = sent()[1001]
    outcome = press(STELLA, row, data_of(row))
    assert outcome.result == "skills:blocked"
    edit = next(r for r in outcome.outbound if r.kind == "edit")
    assert "Blocked by the content scan" in visible(edit.payload["text"])
    assert SkillProposal.objects.get().status == "rejected"
    assert Skill.objects.get().current_version.number == 1


def test_a_huge_diff_is_cut_to_fit_telegram_with_a_pointer_to_the_dashboard(skill, people):
    from bots.skill_reviews import skill_proposal_notify

    # Astral characters count twice in Telegram's limit.
    lines = "".join(
        f"{i}. step 🚀 with a fairly long line of text, number {i}\n" for i in range(400)
    )
    big = skill_md(body=BODY + lines)
    proposal = hostile_proposal(
        skill,
        people["marco"],
        skill_md=big,
        front_matter=parse_skill_md(big).front_matter,
        reason="more",
    )
    skill_proposal_notify(proposal=proposal)
    text = sent()[1001].payload["text"]
    shown = visible(text)
    assert CUT_NOTE in shown and "Approve it to make it" in shown
    assert utf16_len(shown) > 3500  # cut to fit, not to nothing
    assert "+ 0. step 🚀" in shown


def test_nothing_is_sent_without_a_bot_token(
    skill, people, settings, django_capture_on_commit_callbacks
):
    settings.TELEGRAM_BOT_TOKEN = ""
    with django_capture_on_commit_callbacks(execute=True):
        outcome = skill_patch(
            name="deploy-staging",
            old_string="make image",
            new_string="make image-fast",
            author=author(people["marco"]),
        )
    assert outcome.code == "proposed" and not sent()


def test_a_curator_proposal_says_the_curator_made_it(
    skill, people, django_capture_on_commit_callbacks
):
    from skills.models import Via
    from skills.services import skill_propose

    with django_capture_on_commit_callbacks(execute=True):
        skill_propose(
            name="deploy-staging",
            action="delete",
            author=Author(via=Via.SYSTEM, reason="Curator merge"),
            base_version=1,
        )
    text = visible(sent()[1001].payload["text"])
    assert "Proposed by the curator" in text and "the agent" not in text


def test_an_author_without_a_display_name_is_named_by_their_login(
    skill, people, django_capture_on_commit_callbacks
):
    source = author(people["marco"])
    source.actor.display_name = ""
    source.actor.save(update_fields=["display_name"])
    with django_capture_on_commit_callbacks(execute=True):
        skill_patch(
            name="deploy-staging", old_string="make image", new_string="make img", author=source
        )
    assert "Proposed by marco" in visible(sent()[1001].payload["text"])
