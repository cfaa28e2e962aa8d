"""The skills pages as people use them: the library (search, filters, pages, a constant
number of queries), a skill (rendered and sanitised body, front matter, files, versions,
audit trail, usage), older versions, raw text and diffs; chats named only to their readers."""

import re

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from chats.models import Message, Turn
from chats.services import chat_get_or_create, chat_member_ensure
from skills.models import Skill, SkillEvent, SkillUsage, SkillVersion, Via
from skills.reviews import skill_pin, skill_set_status
from skills.services import (
    Author,
    skill_create,
    skill_file_write,
    skill_patch,
    skill_usage_record,
)
from tests.chats.dashboard_helpers import login, page_url, say
from tests.skills.conftest import HOSTILE
from tests.skills.helpers import skill_md

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
LIBRARY = "/skills/"


def make_skill(name, author, *, category="", description=None, body=None, **front):
    content = skill_md(
        name=name,
        description=description or f"How to {name.replace('-', ' ')}.",
        **({"body": body} if body else {}),
        **front,
    )
    outcome = skill_create(name=name, content=content, author=author, category=category)
    assert outcome.code == "applied", outcome.message
    return outcome.skill


def make_it_faster(author):
    """Version 2 of deploy-staging: `make image` patched to `make image-fast`, applied."""
    outcome = skill_patch(
        name="deploy-staging", old_string="make image", new_string="make image-fast", author=author
    )
    assert outcome.code == "applied", outcome.message


def bulk_skills(count, *, prefix="bulk"):
    """`count` skills written straight to the tables (one version, one use, one event each),
    for pages and query counts without running the scanner `count` times."""
    now = timezone.now()
    skills = Skill.objects.bulk_create(
        Skill(slug=f"{prefix}-{n:04d}", category=f"cat-{n % 3}", description=f"Bulk {n}")
        for n in range(count)
    )
    versions = SkillVersion.objects.bulk_create(
        SkillVersion(
            skill=skill,
            number=1,
            change="import",
            skill_md=skill_md(name=skill.slug, description=skill.description),
            front_matter={"name": skill.slug, "description": skill.description},
            content_hash="x",
        )
        for skill in skills
    )
    for skill, version in zip(skills, versions, strict=True):
        skill.current_version = version
    Skill.objects.bulk_update(skills, ["current_version"])
    SkillUsage.objects.bulk_create(
        SkillUsage(skill=skill, version=version, created_at=now)
        for skill, version in zip(skills, versions, strict=True)
    )
    SkillEvent.objects.bulk_create(
        SkillEvent(skill=skill, slug=skill.slug, kind="import", via="command", version=version)
        for skill, version in zip(skills, versions, strict=True)
    )
    return skills


def room(chat_id, title, *people):
    chat, _ = chat_get_or_create(channel="web", chat_id=chat_id, title=title)
    for person in people:
        chat_member_ensure(chat=chat, person=person)
    return chat


def turn_in(chat, status, *, tool_error=False, text="deploy please"):
    trigger = say(chat, text)
    turn = Turn.objects.create(chat=chat, trigger=trigger, status=status)
    if tool_error:
        Message.objects.create(
            chat=chat,
            role=Message.Role.TOOL,
            external_id=f"tool-{turn.pk}",
            metadata={"turn": turn.pk, "is_error": True},
        )
    return turn


def listed(page: str) -> list[str]:
    """The skill names in the library's table, in order."""
    return re.findall(r'<tr class="skill-row[^"]*" id="skill-([^"]+)"', page)


def body_of(page: str) -> str:
    """The rendered SKILL.md body on a skill page."""
    body = page[page.index('id="skill-body"') :]
    return body[: body.index("</div>")]


@pytest.fixture
def deploy(reviewer_author):
    return make_skill("deploy-staging", reviewer_author, category="ops")


@pytest.fixture
def other_group_member(make_person):
    """A member of another chat (not the team room) and of another Django group."""
    gina = make_person("gina")
    room("other-room", "Other group", gina)
    gina.groups.add(Group.objects.create(name="memory reviewers"))
    return gina


# --- who may read ---------------------------------------------------------------------------


def test_anonymous_people_are_sent_to_the_login_page(client, deploy):
    for url in (
        LIBRARY,
        "/skills/deploy-staging/",
        "/skills/deploy-staging/?version=1",
        "/skills/deploy-staging/diff",
        "/skills/deploy-staging/raw",
    ):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_every_logged_in_person_reads_the_library_and_the_nav_links_it(outsider, deploy):
    page = login(outsider).get(LIBRARY).content.decode()
    assert listed(page) == ["deploy-staging"]
    nav = page[page.index("<nav>") : page.index("</nav>")]
    assert '<a href="/skills/">Skills</a>' in nav
    assert nav.index(">Skills</a>") < nav.index(">Memory</a>")


def test_an_unknown_skill_is_404(member):
    assert login(member).get("/skills/nothing-here/").status_code == 404
    assert login(member).get("/skills/nothing-here/diff").status_code == 404


# --- the library ------------------------------------------------------------------------------


def test_the_library_shows_category_status_pin_description_usage_and_last_change(
    reviewer_author, staff_reviewer, member, team_chat
):
    make_skill("deploy-staging", reviewer_author, category="ops")
    make_skill(
        "write-report", reviewer_author, description="House style <b>for</b> incident reports."
    )
    skill_pin(name="write-report", pinned=True, person=staff_reviewer)
    deploy = Skill.objects.get(slug="deploy-staging")
    for _ in range(3):
        skill_usage_record(skill=deploy, version=deploy.current_version, chat=team_chat)

    page = login(member).get(LIBRARY).content.decode()
    assert listed(page) == ["write-report", "deploy-staging"]  # pinned first
    row = page[page.index('id="skill-deploy-staging"') :]
    row = row[: row.index("</tr>")]
    assert "ops" in row and "How to deploy staging." in row
    assert '<span class="label label-active">active</span>' in row
    assert "3 loads" in row and "Created" in row
    pinned_row = page[page.index('id="skill-write-report"') :]
    pinned_row = pinned_row[: pinned_row.index("</tr>")]
    assert "label-pinned" in pinned_row and "never" in pinned_row
    assert "Pinned" in pinned_row  # the last change is the pin, not the creation
    assert "House style &lt;b&gt;for&lt;/b&gt; incident reports." in pinned_row


def test_search_category_and_status_filters(reviewer_author, staff_reviewer, member):
    make_skill("deploy-staging", reviewer_author, category="ops")
    make_skill("deploy-prod", reviewer_author, category="ops", description="Ship it to production.")
    make_skill(
        "write-report", reviewer_author, category="writing", description="Reports on deploys."
    )
    make_skill("old-runbook", reviewer_author, category="ops")
    skill_set_status(name="old-runbook", archived=True, person=staff_reviewer)
    Skill.objects.filter(slug="deploy-prod").update(status=Skill.Status.STALE)
    client = login(member)

    def names(query):
        return listed(client.get(LIBRARY + query).content.decode())

    assert names("") == ["deploy-prod", "deploy-staging", "write-report"]  # active + stale
    assert names("?q=DEPLOY") == ["deploy-prod", "deploy-staging", "write-report"]
    assert names("?q=production") == ["deploy-prod"]
    assert names("?category=writing") == ["write-report"]
    assert names("?status=archived") == ["old-runbook"]
    assert names("?status=stale") == ["deploy-prod"]
    assert names("?status=active&category=ops") == ["deploy-staging"]
    assert names("?status=all&category=ops") == ["deploy-prod", "deploy-staging", "old-runbook"]
    assert names("?q=nothing-like-this") == []
    assert "No skill matches these filters." in client.get(LIBRARY + "?q=zzz").content.decode()
    # A category only archived skills have is still offered, and a bad filter is ignored.
    page = client.get(LIBRARY + "?status=bogus&category=no-such").content.decode()
    assert listed(page) == ["deploy-prod", "deploy-staging", "write-report"]
    assert "(ignored)" in page


def test_the_filters_answer_htmx_with_the_list_partial(deploy, member):
    client = login(member)
    response = client.get(LIBRARY + "?q=deploy", headers=HTMX)
    body = response.content.decode()
    assert response.status_code == 200 and "HX-Request" in response["Vary"]
    assert body.lstrip().startswith('<div id="skill-list"') and "<html" not in body
    assert listed(body) == ["deploy-staging"]
    # Without htmx (or a history restore) the whole page, with the form filled in.
    page = client.get(LIBRARY + "?q=deploy").content.decode()
    assert "<html" in page and 'name="q" value="deploy"' in page
    restore = client.get(
        LIBRARY + "?q=deploy", headers={**HTMX, "HX-History-Restore-Request": "true"}
    )
    assert "<html" in restore.content.decode()


def test_the_library_shows_fifty_a_page_and_pages_keep_the_filters(member):
    bulk_skills(120)
    client = login(member)
    first = client.get(LIBRARY).content.decode()
    assert len(listed(first)) == 50 and listed(first)[0] == "bulk-0000"
    assert "page 1 of 3" in first
    third = client.get(LIBRARY + "?page=3").content.decode()
    in_order = sorted(Skill.objects.values_list("category", "slug"))  # by category, then name
    assert listed(third) == [slug for _, slug in in_order[100:]]
    assert client.get(LIBRARY + "?page=99").status_code == 200  # the last page, not an error
    filtered = client.get(LIBRARY + "?category=cat-1").content.decode()
    assert len(listed(filtered)) == 40 and "40 skills match" in filtered
    assert "Next →" not in filtered
    searched = client.get(LIBRARY + "?q=bulk&status=all").content.decode()
    assert 'href="/skills/?q=bulk&amp;status=all&amp;page=2"' in searched
    second = client.get(LIBRARY + "?q=bulk&status=all&page=2", headers=HTMX).content.decode()
    assert 'href="/skills/?q=bulk&amp;status=all&amp;page=3"' in second
    assert 'href="/skills/?q=bulk&amp;status=all&amp;page=1"' in second


def test_the_library_needs_the_same_queries_for_five_skills_as_for_a_hundred_and_twenty(member):
    client = login(member)
    client.get(LIBRARY)  # the session and the user are loaded once

    def queries():
        with CaptureQueriesContext(connection) as captured:
            assert client.get(LIBRARY).status_code == 200
        return len(captured)

    bulk_skills(5, prefix="few")
    few = queries()
    bulk_skills(115, prefix="many")
    assert queries() == few <= 8


# --- one skill --------------------------------------------------------------------------------

HOSTILE_BODY = """# Deploy

Run **make image** and <script>alert("pwned")</script> then [click](javascript:alert(1)).

<img src=x onerror=alert(1)>
"""


def test_the_skill_page_renders_the_body_sanitised_and_the_front_matter(reviewer_author, member):
    make_skill("rollback-staging", reviewer_author)
    make_skill(
        "deploy-staging",
        reviewer_author,
        body=HOSTILE_BODY,
        version="1.2",
        license="MIT",
        tags=["deploy", "ops"],
        related_skills=["rollback-staging", "not-written-yet"],
        metadata={"hermes": {"owner": "<ops>"}},
        platforms=["linux"],
    )
    page = login(member).get("/skills/deploy-staging/").content.decode()
    body = body_of(page)
    assert "<strong>make image</strong>" in body
    assert "<script" not in body and "<img" not in body and "href=" not in body
    assert "&lt;script&gt;" in body  # raw HTML in the body is shown as text
    assert "<script>alert" not in page  # nowhere on the page: escaped in the raw view too
    assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in page  # the raw SKILL.md
    table = page[page.index('class="front-matter"') : page.index("</table>")]
    assert "1.2" in table and "MIT" in table
    assert '<span class="chip">deploy</span><span class="chip">ops</span>' in table
    assert '<a href="/skills/rollback-staging/">rollback-staging</a>' in table
    assert 'title="There is no skill with this name">not-written-yet</span>' in table
    assert "&quot;owner&quot;: &quot;&lt;ops&gt;&quot;" in table  # metadata as escaped JSON
    assert "platforms" in table and "linux" in table  # other fields too


def test_files_are_listed_with_sizes_and_shown_escaped_with_hidden_code_points_revealed(
    deploy, reviewer_author, member
):
    skill_file_write(
        name="deploy-staging",
        file_path="references/hosts.md",
        file_content="staging-1.internal <b>\n",
        author=reviewer_author,
    )
    # Text stored before the scanner knew a rule: the page shows what the model would read.
    version = Skill.objects.get().current_version
    version.files = {**version.files, "scripts/check.sh": "echo ok\u200b # zero width\n"}
    version.save()
    page = login(member).get("/skills/deploy-staging/").content.decode()
    files = page[page.index('id="skill-files"') : page.index('id="skill-versions"')]
    assert "<code>references/hosts.md</code>" in files and "24\xa0bytes" in files
    assert "staging-1.internal &lt;b&gt;" in files
    assert "echo ok⟦U+200B⟧ # zero width" in files and "\u200b" not in files


def test_the_raw_view_returns_the_stored_text_exactly(deploy, reviewer_author, member):
    skill_file_write(
        name="deploy-staging",
        file_path="scripts/run.sh",
        file_content="#!/bin/sh\necho <x>\n",
        author=reviewer_author,
    )
    client = login(member)
    raw = client.get("/skills/deploy-staging/raw")
    assert raw["Content-Type"] == "text/plain; charset=utf-8"
    assert raw.content.decode() == Skill.objects.get().current_version.skill_md
    assert client.get("/skills/deploy-staging/raw?path=scripts/run.sh").content == (
        b"#!/bin/sh\necho <x>\n"
    )
    assert client.get("/skills/deploy-staging/raw?version=1&path=scripts/run.sh").status_code == 404
    assert client.get("/skills/deploy-staging/raw?path=../../etc/passwd").status_code == 404


def test_an_older_version_is_shown_the_same_way_and_bad_versions_are_404(
    deploy, reviewer_author, member
):
    make_it_faster(reviewer_author)
    client = login(member)
    current = client.get("/skills/deploy-staging/").content.decode()
    assert "make image-fast" in body_of(current) and "Version 2, the current one" in current
    old = client.get("/skills/deploy-staging/?version=1").content.decode()
    assert "make image-fast" not in body_of(old) and "make image" in body_of(old)
    raw = old[old.index('id="skill-raw"') : old.index('id="skill-files"')]
    assert "make image-fast" not in raw
    assert "You are looking at version 1" in old
    for bad in ("3", "0", "-1", "abc", "99999999999999999999"):
        assert client.get(f"/skills/deploy-staging/?version={bad}").status_code == 404, bad


def test_versions_and_the_audit_trail_name_a_chat_only_to_its_readers(
    deploy, staff_reviewer, owner, member, outsider, other_group_member, team_chat
):
    in_room = Author(person=staff_reviewer, chat=team_chat, via=Via.DASHBOARD, reason="faster")
    make_it_faster(in_room)
    page = login(member).get("/skills/deploy-staging/").content.decode()
    versions = page[page.index('id="skill-versions"') : page.index('id="skill-events"')]
    row = versions[versions.index('id="version-2"') :]
    assert "stella" in row and "faster" in row and "patch" in row
    assert f'<a href="{page_url(team_chat)}">Team room</a>' in row
    events = page[page.index('id="skill-events"') : page.index('id="skill-usage"')]
    assert "Patched" in events and "Team room" in events
    assert '<pre class="before">make image</pre>' in events
    assert '<pre class="after">make image-fast</pre>' in events

    for person in (outsider, other_group_member):
        page = login(person).get("/skills/deploy-staging/").content.decode()
        assert "Team room" not in page and page_url(team_chat) not in page
        # Versions 1 and 2 and their events: v1 came from marco's DM, v2 from the team room.
        assert page.count("a chat you are not in") == 4


def test_a_blocked_write_shows_its_findings_and_the_refused_text_escaped(deploy, dm_author, member):
    outcome = skill_patch(
        name="deploy-staging",
        old_string="Check the health page.",
        new_string=f"Check the health page. {HOSTILE} <i>now</i>",
        author=dm_author,
    )
    assert outcome.code == "blocked"
    page = login(member).get("/skills/deploy-staging/").content.decode()
    events = page[page.index('id="skill-events"') : page.index('id="skill-usage"')]
    assert "Blocked by the scanner" in events
    assert '<ul class="findings">' in events and "Blocked by content scan" in events
    assert "&lt;i&gt;now&lt;/i&gt;" in events and "<i>now</i>" not in events


def test_usage_lists_the_turns_with_their_outcomes_and_names_only_readable_chats(
    deploy, owner, member, outsider, other_group_member, team_chat
):
    secret = room("secret-room", "Secret plans", owner)
    version = deploy.current_version
    for chat, status, tool_error in (
        (team_chat, Turn.Status.COMPLETED, False),
        (team_chat, Turn.Status.FAILED, True),
        (secret, Turn.Status.INTERRUPTED, False),
    ):
        turn = turn_in(chat, status, tool_error=tool_error)
        skill_usage_record(skill=deploy, version=version, chat=chat, turn=turn)
    skill_usage_record(skill=deploy, version=version, path="references/x.md", chat=team_chat)

    def usage(person):
        page = login(person).get("/skills/deploy-staging/").content.decode()
        return page[page.index('id="skill-usage"') :]

    seen = usage(member)
    assert "Loaded 4 times" in seen
    assert seen.count("Team room") == 3 and "Secret plans" not in seen
    assert seen.count("a chat you are not in") == 1
    assert '<span class="label label-completed">completed</span>' in seen
    assert '<span class="label label-failed">failed</span>' in seen
    assert '<span class="label label-interrupted">interrupted</span>' in seen
    assert seen.count("had tool errors") == 1 and "<code>references/x.md</code>" in seen
    assert "Secret plans" in usage(owner) and "a chat you are not in" not in usage(owner)
    for person in (outsider, other_group_member):
        seen = usage(person)
        assert "Loaded 4 times" in seen  # counts include chats they are not in
        assert "Team room" not in seen and "Secret plans" not in seen
        assert seen.count("a chat you are not in") == 4


def test_an_archived_skill_is_shown_with_a_banner(deploy, staff_reviewer, member):
    skill_set_status(name="deploy-staging", archived=True, person=staff_reviewer)
    page = login(member).get("/skills/deploy-staging/").content.decode()
    assert 'id="archived-banner"' in page and "This skill is archived." in page
    assert '<span class="label label-archived" id="skill-status">archived</span>' in page
    page = login(member).get("/skills/deploy-staging/?version=1").content.decode()
    assert 'id="archived-banner"' in page
    skill_set_status(name="deploy-staging", archived=False, person=staff_reviewer)
    assert (
        'id="archived-banner"' not in login(member).get("/skills/deploy-staging/").content.decode()
    )


def test_only_reviewers_see_the_actions(
    deploy, reviewer_author, staff_reviewer, group_reviewer, member
):
    make_it_faster(reviewer_author)
    for person in (staff_reviewer, group_reviewer):
        page = login(person).get("/skills/deploy-staging/").content.decode()
        assert 'id="skill-actions"' in page and "Roll back to version 1" in page
        assert 'name="shown_version" value="2"' in page
    page = login(member).get("/skills/deploy-staging/").content.decode()
    assert 'id="skill-actions"' not in page and "Roll back" not in page and "/pin" not in page
    assert "same content as the current version" not in page  # version 1 differs


# --- diffs ------------------------------------------------------------------------------------


def test_the_diff_shows_the_changed_lines_side_by_side_previous_against_current_by_default(
    deploy, reviewer_author, member
):
    make_it_faster(reviewer_author)
    skill_file_write(
        name="deploy-staging",
        file_path="references/hosts.md",
        file_content="staging-1\n",
        author=reviewer_author,
    )
    client = login(member)
    page = client.get("/skills/deploy-staging/diff").content.decode()
    assert "Version 2 (patch" in page and "version 3 (write_file" in page
    assert (
        '<option value="2" selected>' in page and '<option value="3" selected>3 (current)' in page
    )
    assert "references/hosts.md" in page and "SKILL.md</code>" not in page  # unchanged

    page = client.get("/skills/deploy-staging/diff?a=1&b=3").content.decode()
    skill_part = page[page.index("SKILL.md</code>") : page.index("references/hosts.md")]
    assert '<td class="diff-left is-removed">    make image</td>' in skill_part
    assert '<td class="diff-right is-added">    make image-fast</td>' in skill_part
    assert '<span class="count-added">+1</span> <span class="count-removed">−1</span>' in skill_part
    assert "unchanged lines" in skill_part  # the front matter is collapsed
    assert '<span class="label label-diff-added">added</span>' in page

    same = client.get("/skills/deploy-staging/diff?a=2&b=2").content.decode()
    assert "This is the same version." in same


def test_a_diff_reveals_hidden_code_points(deploy, member):
    old = deploy.current_version
    hidden = old.skill_md.replace("Check the health page.", "Check the health\u200b page.")
    SkillVersion.objects.create(
        skill=deploy,
        number=2,
        change="edit",
        skill_md=hidden,
        front_matter=old.front_matter,
        content_hash="y",
    )
    page = login(member).get("/skills/deploy-staging/diff?a=1&b=2").content.decode()
    assert "Check the health⟦U+200B⟧ page." in page and "\u200b" not in page


def test_bad_versions_in_a_diff_answer_404_with_the_form_never_500(deploy, member):
    client = login(member)
    for query in ("?a=9", "?a=1&b=7", "?a=abc", "?b=0", "?a=99999999999999999999"):
        response = client.get(f"/skills/deploy-staging/diff{query}")
        page = response.content.decode()
        assert response.status_code == 404, query
        assert 'id="diff-error"' in page and '<select id="diff-a" name="a">' in page
    assert (
        "deploy-staging has no version 9"
        in client.get("/skills/deploy-staging/diff?a=9").content.decode()
    )


def test_the_skill_page_needs_the_same_queries_for_one_change_as_for_fifteen(
    deploy, member, team_chat
):
    in_room = Author(chat=team_chat, via=Via.COMMAND)
    client = login(member)

    def change_and_use(n):
        old = "Check the health page." if n == 0 else f"Check step {n - 1}."
        outcome = skill_patch(
            name="deploy-staging", old_string=old, new_string=f"Check step {n}.", author=in_room
        )
        assert outcome.code == "applied", outcome.message
        skill = Skill.objects.get()
        turn = turn_in(team_chat, Turn.Status.COMPLETED, text=f"use it {n}")
        skill_usage_record(skill=skill, version=skill.current_version, chat=team_chat, turn=turn)

    def queries():
        with CaptureQueriesContext(connection) as captured:
            assert client.get("/skills/deploy-staging/").status_code == 200
        return len(captured)

    change_and_use(0)
    one = queries()
    for n in range(1, 15):
        change_and_use(n)
    assert queries() == one
    # Content is read for the shown version only, not for every listed version, event or use,
    # and a use's turn is read without its prompt report.
    with CaptureQueriesContext(connection) as captured:
        client.get("/skills/deploy-staging/")
    assert sum('"skill_md"' in query["sql"] for query in captured) == 1
    assert not any('"prompt_report"' in query["sql"] for query in captured)
    assert login(member).get("/skills/deploy-staging/").content.decode().count("Team room") == 45


def test_text_that_never_became_a_version_is_shown_only_to_reviewers_its_author_and_its_chat(
    deploy, owner, member, outsider, other_group_member, staff_reviewer, team_chat
):
    in_room = Author(person=owner, chat=team_chat)  # the agent, asked by olivia in the room
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    blocked = skill_patch(
        name="deploy-staging",
        old_string="Check the health page.",
        new_string=f"Check the health page with GITHUB_TOKEN={token}.",
        author=in_room,
    )
    assert blocked.code == "blocked"
    proposed = skill_patch(
        name="deploy-staging",
        old_string="make image",
        new_string="make image-for-the-launch",
        author=in_room,
    )
    assert proposed.code == "proposed"

    def trail(person):
        page = login(person).get("/skills/deploy-staging/").content.decode()
        return page[page.index('id="skill-events"') : page.index('id="skill-usage"')]

    for person in (owner, member, staff_reviewer):  # its author, its room, a reviewer
        seen = trail(person)
        assert token in seen and "make image-for-the-launch" in seen, person
        assert "Blocked by content scan" in seen and "never became a version" not in seen
    for person in (outsider, other_group_member):
        seen = trail(person)
        assert "Blocked by the scanner" in seen and "Proposed" in seen  # that it happened
        assert token not in seen and "ghp_" not in seen and "Blocked by content scan" not in seen
        assert "make image-for-the-launch" not in seen
        assert seen.count("never became a version") == 2
