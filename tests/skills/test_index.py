"""The skills index keeps what matters: each line keeps its "when to use", the skills listed
are the ones the conversation is about (not the first in alphabetical order), and the list
stays byte-identical across the turns of one topic so the providers' prompt cache holds."""

import pytest

from chats.agent.registry import TurnContext
from chats.agent.tokens import count_tokens
from chats.services import chat_reset, message_append, message_ingest
from skills.index import DESCRIPTION_CHARS, index_description
from skills.models import Skill, SkillVersion
from skills.prompt import skills_section

pytestmark = pytest.mark.django_db

PDF = (
    "Comprehensive PDF manipulation toolkit for extracting text and tables, creating new "
    "PDFs, merging and splitting documents, and handling forms. When Claude needs to fill in "
    "a PDF form or programmatically process, generate, or analyze PDF documents at scale."
)
FILLER_TOPICS = {
    "analytics": ["dashboard", "funnel", "cohort", "retention", "segment"],
    "design": ["palette", "typography", "mockup", "iconography", "wireframe"],
    "hiring": ["interview", "candidate", "onboarding", "referral", "offer"],
    "marketing": ["newsletter", "campaign", "landing", "webinar", "sponsorship"],
    "mobile": ["android", "ios", "simulator", "push", "crashlytics"],
    "research": ["literature", "survey", "citation", "experiment", "hypothesis"],
    "sales": ["pipeline", "quota", "prospect", "demo", "renewal"],
    "support": ["ticket", "escalation", "macro", "satisfaction", "backlog"],
    "writing": ["essay", "headline", "proofread", "glossary", "tone"],
}
TERRAFORM = [
    ("terraform-state-lock", "Release a stuck terraform state lock safely. Use when terraform "
     "apply or plan fails with a lock error on the remote state."),
    ("terraform-state-recover", "Recover a damaged or lost terraform remote state from the "
     "bucket versions. Use when the state file is corrupt after a failed apply."),
    ("terraform-plan-review", "Review a terraform plan before apply: destroys, replacements, "
     "drift. Use when someone asks whether a plan is safe to apply."),
    ("terraform-backend-move", "Move terraform state to a new backend bucket. Use when the "
     "remote state backend changes or the bucket is renamed."),
    ("terraform-import", "Bring existing cloud resources under terraform with import blocks. "
     "Use when resources were created by hand and terraform should own them."),
    ("terraform-drift", "Detect and reconcile drift between terraform state and the cloud. "
     "Use when plan shows changes nobody made."),
]  # fmt: skip
TREASURY = [
    ("cash-forecast", "Weekly cash forecast from the bank exports."),
    ("fx-hedging", "Hedge currency exposure with forward contracts."),
    ("ledger-close", "Month-end ledger close checklist."),
    ("payroll-run", "Run payroll and file the withholding reports."),
    ("refund-invoice", "Issue a refund against a paid customer invoice. Use when a customer "
     "asks for money back on an invoice."),
]  # fmt: skip


def add(slug, *, category="", description="Does a thing.", status="active", pinned=False):
    skill = Skill.objects.create(
        slug=slug, category=category, description=description, status=status, pinned=pinned
    )
    skill.current_version = SkillVersion.objects.create(
        skill=skill, number=1, change="create", skill_md="x", content_hash="h"
    )
    skill.save()
    return skill


def library():
    """56 skills: nine filler categories that sort before `terraform` and `treasury`, whose
    skills the conversations below are about."""
    for category, words in FILLER_TOPICS.items():
        for word in words:
            add(
                f"{category}-{word}",
                category=category,
                description=f"Everything about the {word} work of the {category} people: "
                f"steps, owners and the checklist. Use when a {word} question comes up.",
            )
    for slug, description in TERRAFORM:
        add(slug, category="terraform", description=description)
    for slug, description in TREASURY:
        add(slug, category="treasury", description=description)


def turn(text, *, chat_id="ops-room"):
    message = message_ingest(
        channel="web", chat_id=chat_id, user_id="alice", user_name="Alice", text=text
    ).message
    return TurnContext(chat=message.chat, trigger=message)


def listed(text):
    return {line[2:].split(" ", 1)[0].rstrip(":") for line in text.splitlines()[2:]} - {"…"}


# --- Descriptions ------------------------------------------------------------------------


def test_a_line_keeps_the_when_to_use_sentence():
    add("pdf", category="documents", description=PDF)
    text = skills_section.render(None)
    line = text.splitlines()[2]
    assert "When Claude needs to fill in a PDF form" in line
    assert line.startswith("- pdf [documents]: Comprehensive PDF manipulation toolkit")


def test_a_short_description_is_shown_whole_and_a_leading_use_when_is_enough():
    assert index_description("Deploy to staging.") == "Deploy to staging."
    hermes = (
        "Use when the user asks to restart the gateway or the agent after a config change. "
        + "It covers systemd, launchd, docker and bare processes, with checks after each step. " * 4
    )
    shown = index_description(hermes)
    assert shown.startswith("Use when the user asks to restart the gateway")
    assert len(shown) <= DESCRIPTION_CHARS


def test_a_description_at_the_1024_character_cap_keeps_its_late_when_to_use():
    what = "Builds the quarterly board pack from the finance exports and the KPI sheet. "
    filler = "It formats tables, charts and footnotes in the house style. " * 14
    description = (what + filler + "Use when the board meeting is less than a week away.")[:1024]
    assert len(description) <= 1024 and description.endswith("week away.")
    shown = index_description(description)
    assert "Use when the board meeting is less than a week away." in shown
    assert shown.startswith("Builds the quarterly board pack")
    assert len(shown) <= DESCRIPTION_CHARS
    assert count_tokens(shown) < 80


def test_a_long_description_without_a_cue_is_cut_at_a_word_boundary():
    shown = index_description("word " * 300)
    assert len(shown) <= DESCRIPTION_CHARS and shown.endswith("word…")


# --- Relevance ---------------------------------------------------------------------------


def test_the_skills_the_conversation_is_about_are_listed_though_they_sort_last():
    library()
    context = turn("Our terraform apply failed with a state lock error, how do we recover?")
    text = skills_section.render(context)
    assert count_tokens(text) <= 1200
    shown = listed(text)
    assert {slug for slug, _ in TERRAFORM} <= shown
    left_out = Skill.objects.count() - len(shown)
    assert left_out > 0
    assert f"- … and {left_out} more: call skills_list" in text
    assert text.details["listed"] == len(shown) and text.details["left_out"] == left_out


def test_without_a_conversation_every_category_gets_a_place():
    library()
    shown = listed(skills_section.render(turn("hi")))
    categories = {slug.split("-")[0] for slug in shown}
    assert {"analytics", "writing", "terraform"} <= categories
    assert "cash-forecast" in shown or "fx-hedging" in shown  # treasury too


def test_pinned_skills_come_first_whatever_the_topic():
    library()
    add("zz-house-rules", category="zz", description="How we work.", pinned=True)
    text = skills_section.render(turn("terraform state lock stuck"))
    assert text.splitlines()[2].startswith("- zz-house-rules [zz]:")


def test_skills_used_in_this_chat_are_kept_when_the_message_says_nothing():
    from skills.models import SkillUsage

    library()
    context = turn("hello again")
    used = Skill.objects.get(slug="writing-tone")
    SkillUsage.objects.create(skill=used, chat=context.chat)
    assert "writing-tone" in listed(skills_section.render(context))


# --- Stability ---------------------------------------------------------------------------


def test_turns_on_one_topic_render_byte_identical_text_and_a_new_topic_recomputes():
    library()
    first = skills_section.render(turn("terraform apply failed with a state lock error"))
    second = skills_section.render(turn("ok, once the lock is gone should we run plan again?"))
    third = skills_section.render(turn("thanks!"))
    assert first == second == third
    assert second.details["choice"] == "kept"
    assert "refund-invoice" not in listed(second)

    changed = skills_section.render(
        turn("Different question: a customer wants a refund on a paid invoice, how?")
    )
    assert changed.details["choice"] == "chosen"
    assert changed.details["reason"] == "the topic changed"
    assert "refund-invoice" in listed(changed)


def test_a_compressed_context_recomputes_the_choice():
    library()
    context = turn("terraform apply failed with a state lock error")
    skills_section.render(context)
    message_append(
        chat=context.chat,
        role="summary",
        text="They fixed a terraform lock.",
        metadata={"covers_from_id": 1, "covers_to_id": context.trigger.pk},
    )
    after = skills_section.render(turn("and the refund for that customer invoice?"))
    assert after.details["reason"] == "the context was compressed or reset"


def test_a_reset_recomputes_the_choice():
    library()
    context = turn("terraform apply failed with a state lock error")
    skills_section.render(context)
    chat_reset(chat=context.chat)
    after = skills_section.render(turn("terraform again"))
    assert after.details["reason"] == "the context was compressed or reset"


def test_an_archived_listed_skill_leaves_and_the_choice_is_recomputed():
    library()
    skills_section.render(turn("terraform apply failed with a state lock error"))
    Skill.objects.filter(slug="terraform-drift").update(status="archived")
    after = skills_section.render(turn("and the state lock again?"))
    assert "terraform-drift" not in listed(after)
    assert after.details["reason"] == "a listed skill is gone"


def test_a_newly_pinned_skill_is_listed_from_the_next_turn():
    library()
    first = skills_section.render(turn("terraform apply failed with a state lock error"))
    assert "writing-tone" not in listed(first)
    Skill.objects.filter(slug="writing-tone").update(pinned=True)
    after = skills_section.render(turn("and the state lock again?"))
    assert after.splitlines()[2].startswith("- writing-tone [writing]:")
    assert after.details["reason"] == "the pinned skills changed"


def test_a_new_skill_that_fits_the_topic_much_better_joins_the_list():
    library()
    skills_section.render(turn("terraform apply failed with a state lock error"))
    add(
        "terraform-lock-timeout",
        category="terraform",
        description="Set the terraform state lock timeout. Use when apply waits on a lock.",
    )
    after = skills_section.render(turn("the terraform state lock is stuck again"))
    assert "terraform-lock-timeout" in listed(after)
    assert after.details["reason"] == "a new skill fits better"


def test_each_chat_keeps_its_own_choice():
    library()
    ops = skills_section.render(turn("terraform state lock stuck", chat_id="ops"))
    money = skills_section.render(turn("refund a customer invoice", chat_id="money"))
    assert "refund-invoice" in listed(money) and "refund-invoice" not in listed(ops)
    assert skills_section.render(turn("lock still stuck", chat_id="ops")) == ops


def test_when_every_skill_fits_nothing_is_chosen():
    add("alpha", category="ops", description="Does a thing.")
    text = skills_section.render(turn("anything"))
    assert "more: call skills_list" not in text
    assert text.details == {"listed": 1, "left_out": 0, "choice": "all"}


# --- The prompt report -------------------------------------------------------------------


def test_the_context_report_shows_the_index_tokens_and_how_many_were_left_out():
    from chats.agent.context import build_context
    from chats.agent.llm.base import ProviderInfo
    from chats.prompt_report import render_prompt_report

    library()
    context = turn("terraform state lock stuck")
    built = build_context(
        chat=context.chat,
        trigger=context.trigger,
        provider_info=ProviderInfo(
            name="fake", model="fake", context_tokens=32_000, supports_tools=True
        ),
        tool_specs=[],
        turn_context=context,
        sections=[skills_section],
    )
    [report] = built.report["sections"]
    shown = listed(skills_section.render(context))
    assert report["tokens"] == built.report["tokens"]["sections"]["skills"] > 0
    assert report["details"]["listed"] == len(shown)
    assert report["details"]["left_out"] == Skill.objects.count() - len(shown)
    html = render_prompt_report(built.report)
    left_out = Skill.objects.count() - len(shown)
    assert f"section: skills (choice chosen, left out {left_out}, listed {len(shown)}, " in html


def test_five_hundred_long_skills_stay_within_every_budget(monkeypatch, settings):
    from skills import prompt
    from skills.selectors import IndexRow

    long = ("Builds and checks the thing for the team with many careful steps. " * 15)[:1000]
    rows = [
        IndexRow(f"skill-{n:03d}", f"cat-{n % 7}", f"{long} Use when task {n} comes up.", False)
        for n in range(500)
    ]
    monkeypatch.setattr(prompt, "skills_index_rows", lambda **audience: rows)
    monkeypatch.setattr(prompt, "skills_maybe_indexed", lambda context: True)  # rows not stored
    context = turn("task 42 comes up again")
    for budget in (100, 400, 1200, 3000):
        settings.SKILLS_INDEX_TOKENS = budget
        text = skills_section.render(context)
        assert count_tokens(text) <= budget
        shown = len(listed(text))
        assert f"- … and {500 - shown} more: call skills_list" in text
        assert text.details["listed"] == shown


def test_through_the_context_builder_the_index_stays_until_a_reset():
    from chats.agent.context import build_context
    from chats.agent.llm.base import ProviderInfo

    library()
    provider = ProviderInfo(name="fake", model="fake", context_tokens=32_000, supports_tools=True)

    def index_of(text):
        context = turn(text)
        built = build_context(
            chat=context.chat,
            trigger=context.trigger,
            provider_info=provider,
            tool_specs=[],
            turn_context=context,
            sections=[skills_section],
        )
        system = built.messages[0]["content"]
        details = built.report["sections"][0]["details"]
        return system[system.index("## Skills") :], details, context.chat

    first, _, chat = index_of("terraform apply failed with a state lock error")
    second, details, _ = index_of("ok, once the lock is gone should we run plan again?")
    assert first == second and details["choice"] == "kept"
    chat_reset(chat=chat)
    _, details, _ = index_of("and the lock?")
    assert details["reason"] == "the context was compressed or reset"


def test_a_chinese_conversation_finds_its_chinese_skill():
    library()
    add(
        "rollback-release",
        category="zz-ops",
        description="回滚生产环境的部署。用于发布失败、需要恢复旧版本时。",
    )
    assert index_description("回滚生产环境的部署。用于发布失败、需要恢复旧版本时。" * 3).startswith(
        "回滚生产环境的部署。用于发布失败"
    )
    text = skills_section.render(turn("发布失败了，怎么回滚部署？"))
    assert "rollback-release" in listed(text)


def test_without_a_working_cache_the_index_is_still_chosen_and_rendered(monkeypatch, caplog):
    from skills import index

    class Down:
        def get(self, *args, **kwargs):
            raise ConnectionError("redis is down")

        set_many = get

    library()
    monkeypatch.setattr(index, "cache", Down())
    text = skills_section.render(turn("terraform state lock stuck"))
    assert {slug for slug, _ in TERRAFORM} <= listed(text)
    assert text.details["choice"] == "chosen"
    assert "cache unreadable" in caplog.text
