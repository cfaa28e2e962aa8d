"""Skill reviews by Telegram buttons and /skills, end to end: the real bot process against
the fake Bot API server (real HTTP, Telegram's HTML check), a Celery worker and the test
database. Assertions are what the people in those chats see."""

import dataclasses

import pytest
from django.contrib.auth.models import Group

from chats.models import ChatKind, Message
from chats.services import actor_get_or_create, chat_get_or_create
from skills.models import Skill, SkillProposal
from skills.services import Author, skill_create, skill_patch
from tests.bots.conftest import GROUP_ID
from tests.bots.test_end_to_end import final_text, wait
from tests.fakes.telegram_server import group_chat, private_chat, tg_user
from tests.skills.conftest import make_team
from tests.skills.helpers import skill_md

pytestmark = pytest.mark.timeout(240)

STELLA = tg_user(1001, "Stella")
GRETA = tg_user(1002, "Greta")
MARCO = tg_user(1003, "Marco")


def answers(tg) -> list[str]:
    return [call.params.get("text", "") for call in tg.calls_of("answerCallbackQuery")]


def test_reviewers_decide_a_skill_change_by_buttons_and_only_they_can(
    telegram_live, make_person, settings
):
    tg = telegram_live.tg
    stella = make_person("stella", is_staff=True)
    greta = make_person("greta")
    greta.groups.add(Group.objects.create(name=settings.SKILLS_REVIEWERS_GROUP))
    marco = make_person("marco")
    for user, person in ((STELLA, stella), (GRETA, greta), (MARCO, marco)):
        actor_get_or_create(
            channel="telegram", user_id=user["id"], display_name=user["first_name"], person=person
        )
    marco_actor = actor_get_or_create(channel="telegram", user_id=1003, display_name="Marco")
    own, _ = chat_get_or_create(channel="telegram", chat_id="1003", kind=ChatKind.DM)
    make_team(
        skill_create(
            name="deploy-staging",
            content=skill_md(),
            author=Author(actor=marco_actor, person=marco, chat=own),
        ).skill
    )
    group, _ = chat_get_or_create(
        channel="telegram", chat_id=str(GROUP_ID), kind=ChatKind.GROUP, title="Ops"
    )
    proposal = skill_patch(
        name="deploy-staging",
        old_string="make image",
        new_string="make image-fast",
        author=Author(
            actor=marco_actor,
            person=marco,
            chat=group,
            reason="faster </pre><b>builds</b>\u200b",
        ),
    ).proposal
    assert proposal is not None

    [prompt] = wait(lambda: tg.bot_messages(1001), what="Stella's review request")
    [greta_prompt] = wait(lambda: tg.bot_messages(1002), what="Greta's review request")
    assert tg.bot_messages(1003) == []  # the author is no reviewer
    assert prompt.parse_mode == "HTML"  # Telegram parsed it: hostile text stayed text
    shown = final_text(prompt)
    assert "Skill change: patch deploy-staging" in shown
    assert "Why: faster </pre><b>builds</b>⟦U+200B⟧" in shown
    assert "-     make image\n+     make image-fast" in shown
    approve = prompt.reply_markup["inline_keyboard"][0][0]["callback_data"]
    assert approve == f"skl:{proposal.pk}:1:a"

    # Marco presses the same data in his own chat, and Stella in a group: nothing happens.
    tg.press(MARCO, dataclasses.replace(prompt, chat_id=1003), approve)
    wait(lambda: len(answers(tg)) == 1, what="the refusal")
    tg.send(group_chat(GROUP_ID, "Ops"), STELLA, "hello team")
    tg.press(STELLA, dataclasses.replace(prompt, chat_id=GROUP_ID), approve)
    wait(lambda: len(answers(tg)) == 2, what="the group refusal")
    assert answers(tg) == [
        "Only skill reviewers can decide skill changes.",
        "Skill changes are decided in your private chat with me.",
    ]
    assert SkillProposal.objects.get(pk=proposal.pk).status == "pending"
    assert tg.bot_messages(1001)[0].edits == 0

    tg.press(STELLA, prompt, approve)
    wait(lambda: SkillProposal.objects.get(pk=proposal.pk).status == "approved", what="approval")
    wait(lambda: tg.bot_messages(1001)[0].edits == 1, what="the edited request")
    decided = tg.bot_messages(1001)[0]
    assert "✅ Approved by Stella: deploy-staging is now at version 2." in final_text(decided)
    assert not decided.reply_markup
    assert "make image-fast" in Skill.objects.get().current_version.skill_md

    reject = greta_prompt.reply_markup["inline_keyboard"][0][1]["callback_data"]
    tg.press(GRETA, greta_prompt, reject)
    wait(lambda: tg.bot_messages(1002)[0].edits == 1, what="Greta's request updated")
    assert "Already decided: approved by stella." in final_text(tg.bot_messages(1002)[0])
    assert Skill.objects.get().current_version.number == 2
    # No call was refused by Telegram along the way.
    assert all(call.status == 200 for call in tg.calls if call.method != "getUpdates")


def test_skills_answers_in_a_private_chat_and_the_menu_lists_it(telegram_live, make_person):
    tg = telegram_live.tg
    author = Author(person=make_person("sam", is_staff=True), via="dashboard")
    skill_create(name="deploy-staging", content=skill_md(), author=author)

    menu = tg.calls_of("setMyCommands")[-1].params["commands"]
    names = [entry["command"] for entry in menu]
    assert "skills" in names and names[-1] == "help"

    tg.send(private_chat(MARCO), MARCO, "/skills")
    [answer] = wait(lambda: tg.bot_messages(1003), what="the /skills answer")
    assert final_text(answer) == "Skills I know (1):\n• deploy-staging: How to deploy to staging."
    assert not Message.objects.exists()  # a command is not history
