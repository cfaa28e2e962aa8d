"""Search finds text inside files: a plain term matches messages whose attachments' derived
text (extracted text, descriptions) holds it, on both databases, only in chats the searcher
may read, and the hit names the file (API, dashboard, the agent's session_search)."""

import pytest
from django.db import connection

from attachments.models import Attachment
from attachments.services import attachment_store
from chats.agent.builtin_tools import SESSION_SEARCH
from chats.agent.registry import TurnContext
from chats.models import ChatMember
from chats.search import ELLIPSIS, chat_message_search, message_search
from chats.services import chat_get_or_create, chat_member_ensure, message_ingest
from tests.chats.dashboard_helpers import login

pytestmark = [pytest.mark.django_db, pytest.mark.storage]

RUNBOOK = (
    "Runbook for the nightly job.\n\nIf the queue stalls, restart the flux capacitor "
    "with `systemctl restart capacitor` and page the on-call engineer."
)


def with_text(message, name="runbook.txt", *, text="", description=""):
    """A file on `message` whose derived text is set as a processor would set it."""
    attachment = attachment_store(message=message, name=name, data=b"placeholder bytes\n")
    Attachment.objects.filter(pk=attachment.pk).update(
        extracted_text=text, description=description, state=Attachment.State.READY
    )
    return Attachment.objects.get(pk=attachment.pk)


def found(person, query, **kwargs):
    return [
        (hit.message.text, getattr(hit.matched_in, "name", None))
        for hit in message_search(person=person, query=query, **kwargs)
    ]


def test_a_word_inside_a_file_finds_its_message_and_names_the_file(say, owner, member):
    message = say("here is the runbook")
    attachment = with_text(message, text=RUNBOOK)
    say("unrelated chatter")
    for person in (owner, member):
        hits = message_search(person=person, query="capacitor")
        assert [hit.message.pk for hit in hits] == [message.pk]
        hit = hits[0]
        assert hit.matched_in.id == attachment.pk
        assert hit.matched_in.name == "runbook.txt" and hit.matched_in.noun == "file"
        assert "flux capacitor" in hit.snippet
        marked = [hit.snippet[start:end] for start, end in hit.highlights]
        assert marked and all(word.lower() == "capacitor" for word in marked)


def test_an_image_description_is_searched_too(say, owner, png):
    message = say("look at this")
    attachment = attachment_store(message=message, name="screen.png", data=png)
    Attachment.objects.filter(pk=attachment.pk).update(
        description="A terminal showing ECONNREFUSED on port 5432."
    )
    assert found(owner, "econnrefused") == [("look at this", "screen.png")]


def test_a_message_whose_own_text_matches_is_a_text_hit_once(say, owner):
    message = say("the capacitor is fine")
    with_text(message, text=RUNBOOK)
    hits = message_search(person=owner, query="capacitor")
    assert len(hits) == 1 and hits[0].matched_in is None


def test_every_clause_must_be_in_the_file_and_exclusions_hold(say, owner):
    with_text(say("runbook one"), "one.txt", text=RUNBOOK)
    with_text(say("runbook two"), "two.txt", text="restart the flux capacitor, then wait")
    with_text(say("draft three"), "three.txt", text="the capacitor plan")
    assert {name for _, name in found(owner, "capacitor")} == {"one.txt", "two.txt", "three.txt"}
    assert found(owner, "capacitor on-call") == [("runbook one", "one.txt")]
    assert found(owner, "capacitor -wait") == [
        ("draft three", "three.txt"),
        ("runbook one", "one.txt"),
    ]
    # A word excluded from the message's own text excludes its files' hits too.
    assert found(owner, "capacitor -draft") == [
        ("runbook two", "two.txt"),
        ("runbook one", "one.txt"),
    ]
    assert found(owner, '"flux capacitor" OR nothing-such') == [
        ("runbook two", "two.txt"),
        ("runbook one", "one.txt"),
    ]
    assert found(owner, "capac*") and not found(owner, "apacitor*")
    # A short word next to a long one is tested on the index's candidates.
    assert found(owner, "capacitor th") == [
        ("draft three", "three.txt"),
        ("runbook two", "two.txt"),
        ("runbook one", "one.txt"),
    ]
    # Words are not mixed between a message and its file.
    assert found(owner, "capacitor three") == []


def test_only_short_words_do_not_look_inside_files(say, owner):
    with_text(say("nothing here"), text="db ok")
    assert found(owner, "db") == []


def test_filters_narrow_file_hits(say, owner, member, team_chat):
    with_text(say("from olivia"), "a.txt", text=RUNBOOK)
    other, _ = chat_get_or_create(channel="web", chat_id="side-room", title="Side room")
    chat_member_ensure(chat=other, person=owner, role=ChatMember.Role.OWNER)
    with_text(say("in the side room", chat=other), "b.txt", text=RUNBOOK)
    assert [name for _, name in found(owner, "capacitor")] == ["b.txt", "a.txt"]
    assert [name for _, name in found(owner, 'capacitor in:"side room"')] == ["b.txt"]
    assert [name for _, name in found(owner, "capacitor has:document")] == ["b.txt", "a.txt"]
    assert found(owner, "capacitor has:image") == []
    assert found(owner, "capacitor from:nobody-such") == []
    assert [name for _, name in found(owner, "capacitor", chat=team_chat)] == ["a.txt"]


def test_file_hits_and_text_hits_merge_newest_first_within_the_limit(say, owner):
    first = say("capacitor in words")
    second = say("a file")
    with_text(second, text=RUNBOOK)
    third = say("capacitor again")
    hits = message_search(person=owner, query="capacitor")
    assert [hit.message.pk for hit in hits] == [third.pk, second.pk, first.pk]
    assert [hit.matched_in is not None for hit in hits] == [False, True, False]
    assert [hit.message.pk for hit in message_search(person=owner, query="capacitor", limit=2)] == [
        third.pk,
        second.pk,
    ]


def test_the_snippet_is_a_window_around_a_match_deep_in_a_long_text(say, owner):
    text = "filler words " * 40_000 + "the needle-in-haystack line " + "more filler " * 1000
    with_text(say("a long manual"), "manual.txt", text=text)
    (hit,) = message_search(person=owner, query="needle-in-haystack")
    assert hit.snippet.startswith(ELLIPSIS) and hit.snippet.endswith(ELLIPSIS)
    assert len(hit.snippet) < 300
    assert [hit.snippet[s:e] for s, e in hit.highlights] == ["needle-in-haystack"]


def test_the_index_follows_changes_and_deletions(say, owner):
    attachment = with_text(say("notes"), text="alpha bravo charlie")
    assert found(owner, "bravo") == [("notes", "runbook.txt")]
    Attachment.objects.filter(pk=attachment.pk).update(extracted_text="delta echo")
    assert found(owner, "bravo") == [] and found(owner, "echo") == [("notes", "runbook.txt")]
    Attachment.objects.filter(pk=attachment.pk).update(state=Attachment.State.FAILED)
    assert found(owner, "echo") == [("notes", "runbook.txt")]  # a state change keeps it
    attachment.delete()
    assert found(owner, "echo") == []


def test_older_files_past_the_walk_are_found(say, owner):
    """More files in scope than PostgreSQL's newest-first walk reads (WALK_ROWS): the index
    finds the older one (SQLite reads its FTS5 index from the start)."""
    old = say("old one")
    with_text(old, "old.txt", text=RUNBOOK)
    for index in range(55):
        with_text(say(f"newer {index}"), f"n{index}.txt", text="nothing to see")
    assert found(owner, "capacitor") == [("old one", "old.txt")]


# --- Who may find it --------------------------------------------------------------------


@pytest.fixture
def secret_file(say):
    message = say("quarterly numbers")
    return with_text(message, "numbers.txt", text="the pelican acquisition closes in May")


def test_outsider_and_other_groups_members_find_nothing(secret_file, outsider, make_person):
    assert found(outsider, "pelican") == []
    stranger = make_person("greta")
    group, _ = chat_get_or_create(channel="telegram", chat_id="-100777", title="Other group")
    chat_member_ensure(chat=group, person=stranger)
    message_ingest(channel="telegram", chat_id="-100777", user_id="g", text="pelican party")
    assert found(stranger, "pelican") == [("pelican party", None)]
    assert found(stranger, "acquisition") == []
    assert found(None, "acquisition") == []


def test_the_api_names_the_file_and_refuses_others_integrations(
    secret_file, owner, outsider, api_for
):
    response = api_for(owner).get("/api/v1/search", {"q": "acquisition"})
    assert response.status_code == 200
    (result,) = response.json()["results"]
    assert result["matched_in"] == {
        "source": "attachments",
        "kind": "file",
        "id": secret_file.pk,
        "name": "numbers.txt",
    }
    assert "<" not in result["snippet"] and "acquisition" in result["snippet"]
    assert [a["id"] for a in result["message"]["attachments"]] == [secret_file.pk]
    # Another person's integration reads nothing of this chat.
    response = api_for(outsider).get("/api/v1/search", {"q": "acquisition"})
    assert response.status_code == 200 and response.json()["results"] == []
    # A text hit says it is one.
    response = api_for(owner).get("/api/v1/search", {"q": "quarterly"})
    assert response.json()["results"][0]["matched_in"] is None


def test_the_dashboard_names_the_file(secret_file, member, outsider):
    page = login(member).get("/search", {"q": "acquisition"}).content.decode()
    assert 'class="matched-in">in the file <span class="matched-in-name">numbers.txt</span>' in (
        page
    )
    assert "<mark>acquisition</mark>" in page
    page = login(outsider).get("/search", {"q": "acquisition"}).content.decode()
    assert "numbers.txt" not in page and "pelican" not in page


def test_session_search_in_the_chat_names_the_file(secret_file, team_chat, say):
    trigger = say("what about the deal?")
    assert [h.matched_in.name for h in chat_message_search(chat=team_chat, query="pelican")] == [
        "numbers.txt"
    ]
    context = TurnContext(chat=team_chat, trigger=trigger)
    answer = SESSION_SEARCH.handler(context, {"query": "pelican"})
    (result,) = answer["results"]
    assert result["found_in_file"] == {"id": secret_file.pk, "name": "numbers.txt"}
    assert "pelican" in result["snippet"]


def test_with_a_full_page_of_text_hits_only_newer_files_are_looked_for(say, owner):
    with_text(say("old file"), "old.txt", text=RUNBOOK)
    texts = [say(f"capacitor note {index}") for index in range(3)]
    newest = say("new file")
    with_text(newest, "new.txt", text=RUNBOOK)
    hits = message_search(person=owner, query="capacitor", limit=3)
    assert [hit.message.pk for hit in hits] == [newest.pk, texts[2].pk, texts[1].pk]
    assert hits[0].matched_in.name == "new.txt"
    hits = message_search(person=owner, query="capacitor", limit=10)
    assert [hit.matched_in.name for hit in hits if hit.matched_in] == ["new.txt", "old.txt"]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's index path")
def test_postgresql_bounds_the_index_path_in_time_and_keeps_the_transaction(
    say, owner, monkeypatch, caplog
):
    """Past the walk, a file search the index cannot narrow stops at INDEX_MS with the hits
    found so far; the caller's transaction (a test's, here) goes on."""
    from chats import search_sources

    old = say("old one")
    with_text(old, "old.txt", text=RUNBOOK)
    newer = []
    for index in range(search_sources.WALK_ROWS):
        newer.append(say(f"newer {index}"))
        with_text(newer[-1], f"n{index}.txt", text="nothing to see" if index else RUNBOOK)
    monkeypatch.setattr(search_sources, "INDEX_MS", "50")
    slow = search_sources.without_walking
    monkeypatch.setattr(
        search_sources,
        "without_walking",
        lambda sql, params: slow("SELECT 1, 1 FROM pg_sleep(1)", []),
    )
    hits = message_search(person=owner, query="capacitor")
    assert [hit.matched_in.name for hit in hits] == ["n0.txt"]  # old.txt was not reached
    assert "file search stopped after 50 ms" in caplog.text
    assert found(owner, "nothing") and Attachment.objects.count() == 51  # still usable
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone()[0] == "0"
