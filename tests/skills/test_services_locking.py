"""No database lock is held while a change is computed: a hostile patch's result is built
before the transaction opens, and its size is refused before it is built."""

import threading

import pytest
from django.db import close_old_connections, connection

from chats.services import message_ingest
from skills import services
from skills.models import Skill, SkillEvent
from skills.services import skill_patch, skill_usage_record
from tests.skills.helpers import skill_md

WAIT = 60  # seconds a thread may wait before the test gives up (a hang, not a measurement)


def _in_thread(target, results: dict, key: str) -> threading.Thread:
    def run():
        try:
            results[key] = target()
        except Exception as exc:  # noqa: BLE001 - asserted by the test
            results[f"{key}_error"] = exc
        finally:
            close_old_connections()
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.storage
@pytest.mark.django_db(transaction=True)
def test_other_writes_complete_while_a_patch_result_is_being_built(dm_author, monkeypatch):
    """The build of a replace_all is held open on an event; meanwhile another chat's post
    and a write that locks the very skill's row (a recorded use) must both complete."""
    skill = services.skill_create(name="deploy-staging", content=skill_md(), author=dm_author).skill
    building, release = threading.Event(), threading.Event()
    real_apply_patch = services.apply_patch

    def blocking_apply_patch(*args, **kwargs):
        building.set()
        if not release.wait(WAIT):
            raise AssertionError("the test never released the build")
        return real_apply_patch(*args, **kwargs)

    monkeypatch.setattr(services, "apply_patch", blocking_apply_patch)
    results: dict = {}
    patcher = _in_thread(
        lambda: skill_patch(
            name="deploy-staging",
            old_string="make image",
            new_string="make image-fast",
            replace_all=True,
            author=dm_author,
        ),
        results,
        "patch",
    )
    try:
        assert building.wait(WAIT), "the patch never started building"

        def other_writes():
            posted = message_ingest(
                channel="web", chat_id="room-2", user_id="bob", user_name="Bob", text="hello"
            )
            used = skill_usage_record(skill=skill, version=skill.current_version, path="")
            return posted, used

        writer = _in_thread(other_writes, results, "writes")
        writer.join(WAIT)
        # Both writes finished while the patch was still building (it waits for `release`).
        assert not writer.is_alive(), "a write waited for the patch: a lock is held"
        assert "writes_error" not in results, results.get("writes_error")
        assert not release.is_set() and patcher.is_alive()
    finally:
        release.set()
        patcher.join(WAIT)
    assert "patch_error" not in results, results.get("patch_error")
    assert results["patch"].code == "applied", results["patch"].message
    assert Skill.objects.get().current_version.number == 2


@pytest.mark.storage
@pytest.mark.django_db(transaction=True)
def test_a_draft_built_on_a_version_that_moved_is_built_again(dm_author, monkeypatch):
    """A change that lands between building and storing is not overwritten: the patch is
    built again on the new version and keeps both changes."""
    services.skill_create(name="deploy-staging", content=skill_md(), author=dm_author)
    real_apply_patch = services.apply_patch
    calls = []

    def apply_patch_with_a_change_in_between(*args, **kwargs):
        calls.append(args[0])
        if len(calls) == 1:
            # Another writer's patch lands while this one is being built (another thread,
            # so its own connection and transaction, as in production).
            results: dict = {}
            _in_thread(
                lambda: skill_patch(
                    name="deploy-staging",
                    old_string="Check the health page.",
                    new_string="Check the health page and the logs.",
                    author=dm_author,
                ),
                results,
                "other",
            ).join(WAIT)
            assert results["other"].code == "applied", results
        return real_apply_patch(*args, **kwargs)

    monkeypatch.setattr(services, "apply_patch", apply_patch_with_a_change_in_between)
    outcome = skill_patch(
        name="deploy-staging",
        old_string="make image",
        new_string="make image-fast",
        author=dm_author,
    )
    assert outcome.code == "applied" and "now version 3" in outcome.message
    text = Skill.objects.get().current_version.skill_md
    assert "make image-fast" in text and "Check the health page and the logs." in text
    assert len(calls) == 3  # this patch twice (built again), the other writer's once


@pytest.mark.django_db
def test_a_replace_all_past_the_size_limits_is_refused_before_it_is_built(skill, dm_author):
    # Each "a" of the SKILL.md becomes 20,000 characters: far past the limit.
    outcome = skill_patch(
        name="deploy-staging",
        old_string="a",
        new_string="b" * 20_000,
        replace_all=True,
        author=dm_author,
    )
    assert outcome.code == "invalid", outcome.message
    assert "the patched text would have up to" in outcome.message
    assert "at most 116,400 are allowed" in outcome.message
    assert Skill.objects.get().current_version.number == 1
    assert not SkillEvent.objects.filter(kind=SkillEvent.Kind.BLOCKED).exists()
