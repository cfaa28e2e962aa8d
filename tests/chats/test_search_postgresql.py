"""How search runs on PostgreSQL (`chats.search_postgresql`, migration 0012): both plans
give the oracle's answer, the walk's steps and its switch to the index, the planner
settings put back, and the pair table that answers 2-character ASCII misses. The oracle
tests also run on SQLite (where the plan constants do not exist, they check the same
answers)."""

import re

import pytest
from django.db import connection
from django.db.models import Q
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from chats import search_postgresql
from chats.models import Message
from chats.search import SEARCHABLE_ROLES, message_search, parse_search_query
from chats.services import message_ingest, message_record_edit

pytestmark = [pytest.mark.django_db, pytest.mark.storage]

only_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="PostgreSQL's plans and pair table"
)

WORDS = ["deploy", "Deployment", "database", "migration", "migrate", "release", "quasar"]
QUERIES = [
    "deploy",
    "zeppelin",
    "zeppelin OR quasar",
    '"database migration"',
    "migr*",
    "migr* database",
    "deploy -zeppelin",
    "deploy NOT migr*",
    "de",
    "deploy 部署",
    "quokka",
    "from:olivia deploy",
]


def say(text, *, chat_id="team-room", user="u-olivia", **extra):
    return message_ingest(channel="web", chat_id=chat_id, user_id=user, text=text, **extra).message


def oracle(person_chats, query, limit=20):
    """Python's answer: the parsed query over the searchable messages of `person_chats`."""
    parsed = parse_search_query(query)

    def has(term, text):
        if term.prefix:
            return re.search(r"(?i)(?:^|\W)" + re.escape(term.text), text) is not None
        return term.text.lower() in text.lower()

    rows = Message.objects.filter(chat__in=person_chats, role__in=SEARCHABLE_ROLES)
    for name in parsed.authors:
        rows = rows.filter(
            Q(actor__display_name__icontains=name) | Q(actor__person__username__iexact=name)
        )
    return [
        m.pk
        for m in rows.order_by("-pk")
        if all(any(has(t, m.text) for t in clause) for clause in parsed.clauses)
        and not any(has(t, m.text) for t in parsed.excluded)
    ][:limit]


@pytest.fixture
def history(team_chat, owner, outsider):
    """~150 messages in the team room and an outsider's room: common words, rare ones,
    rare ones that are old, and phrases whose words are common apart."""
    for i in range(150):
        words = [WORDS[(i * 5 + k * 3) % len(WORDS)] for k in range(i % 4 + 1)]
        if i % 13 == 0:
            words.append("Zeppelin")
        if i % 37 == 0:
            words.append("database migration")
        if i % 11 == 0:
            words.append("部署")
        text = " ".join(words) + f" #{i}"
        if i % 3 == 0:
            say(text, chat_id="oscar-room", user="u-oscar", member=outsider)
        else:
            say(text, user="u-olivia" if i % 2 else "u-marco", user_name="Olivia")
    return [team_chat.pk]


@pytest.mark.parametrize("plan", ["planner's choice", "always walk", "always index"])
@pytest.mark.parametrize("query", QUERIES)
def test_every_plan_gives_the_oracles_answer(history, owner, monkeypatch, plan, query):
    if plan != "planner's choice" and connection.vendor != "postgresql":
        pytest.skip("the plan constants are PostgreSQL's")
    if plan == "always walk":
        monkeypatch.setattr(search_postgresql, "INDEX_ROW_COST", 1e12)
        monkeypatch.setattr(search_postgresql, "WALK_SAMPLE", 3)  # many small steps
    elif plan == "always index":
        monkeypatch.setattr(search_postgresql, "INDEX_ROW_COST", 0.0)
        monkeypatch.setattr(search_postgresql, "WALK_SAMPLE", 2)
    for limit in (3, 20):
        hits = message_search(person=owner, query=query, limit=limit)
        assert [hit.message.pk for hit in hits] == oracle(history, query, limit), limit


@only_postgresql
def test_the_walk_switches_to_the_index_for_the_older_rest(history, owner, monkeypatch):
    monkeypatch.setattr(search_postgresql, "WALK_SAMPLE", 2)
    monkeypatch.setattr(search_postgresql, "INDEX_ROW_COST", 1e-6)  # switch at once
    # The candidate count would choose the index at the start: make it say "common".
    monkeypatch.setattr(search_postgresql, "_count_candidates", lambda parsed: (True, 10**9, 10**9))
    with CaptureQueriesContext(connection) as queries:
        hits = message_search(person=owner, query="zeppelin OR quasar", limit=20)
    statements = [query["sql"] for query in queries.captured_queries]
    assert any("ROWS UNBOUNDED PRECEDING" in sql for sql in statements)  # walked...
    assert any("m.id < " in sql and "enable_indexscan" in sql for sql in statements)  # ...then
    assert [hit.message.pk for hit in hits] == oracle(history, "zeppelin OR quasar")


@only_postgresql
def test_planner_settings_are_put_back(history, owner, monkeypatch):
    monkeypatch.setattr(search_postgresql, "INDEX_ROW_COST", 0.0)
    assert message_search(person=owner, query="zeppelin")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('enable_indexscan'), current_setting('enable_seqscan'),"
            " current_setting('jit')"
        )
        assert cursor.fetchone() == ("on", "on", "on")


@only_postgresql
def test_a_rare_match_among_common_candidates_is_still_found(history, owner):
    # Every message has a trigram candidate for "deploy"; only one has the Chinese word.
    rare = say("deploy 麒麟 once")
    assert [hit.message.pk for hit in message_search(person=owner, query="deploy 麒麟")] == [
        rare.pk
    ]


@only_postgresql
def test_readers_rule_holds_on_every_plan(history, owner, outsider, monkeypatch):
    for cost in (0.0, 1e12):
        monkeypatch.setattr(search_postgresql, "INDEX_ROW_COST", cost)
        outsider_hits = message_search(person=outsider, query="zeppelin OR quasar")
        assert outsider_hits
        assert {hit.message.chat.chat_key for hit in outsider_hits} == {"web:oscar-room"}
        owner_hits = message_search(person=owner, query="zeppelin OR quasar")
        assert {hit.message.chat.chat_key for hit in owner_hits} == {"web:team-room"}


# --- Pairs of ASCII letters and digits (migration 0012) ---------------------------------


def stored_pairs(*pairs):
    with connection.cursor() as cursor:
        cursor.execute("SELECT pair FROM chats_search_pair WHERE pair = ANY(%s)", [list(pairs)])
        return {row[0] for row in cursor.fetchall()}


@pytest.fixture
def without_test_pairs():
    """The pairs these tests use, removed (inside the test's transaction) in case other
    tests' committed messages left them."""
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM chats_search_pair WHERE pair IN ('qj', 'jq', 'vw', 'wk')")


@only_postgresql
def test_pairs_of_a_text_are_its_adjacent_ascii_letters_and_digits():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT array_agg(p ORDER BY p) FROM chats_ascii_pairs('Abcd, dé QZ 12 x 部署') p"
        )
        assert cursor.fetchone()[0] == ["12", "ab", "bc", "cd", "qz"]
        cursor.execute("SELECT count(*) FROM chats_ascii_pairs(repeat('ab', 500000)) p")
        assert cursor.fetchone()[0] == 2  # one pass over a 1 MB run: "ab" and "ba"


@only_postgresql
def test_stored_and_edited_texts_add_their_pairs(team_chat, without_test_pairs):
    assert stored_pairs("qj", "jq", "vw", "wk") == set()
    message = say("the QJ code")
    assert stored_pairs("qj", "jq") == {"qj"}
    message_record_edit(message=message, text="the vwk code")
    assert stored_pairs("vw", "wk") == {"vw", "wk"}
    Message.objects.bulk_create(
        [
            Message(
                chat=team_chat,
                role="user",
                text=f"x jq{i}",
                external_id=f"bulk-{i}",
                created_at=timezone.now(),
            )
            for i in range(3)
        ]
    )
    assert stored_pairs("jq") == {"jq"}


@only_postgresql
def test_a_pair_nothing_holds_is_answered_by_the_pair_table_alone(
    team_chat, owner, without_test_pairs
):
    say("deploy something")
    with CaptureQueriesContext(connection) as queries:
        assert message_search(person=owner, query="qj") == []
    assert len(queries.captured_queries) == 1
    assert "chats_search_pair" in queries.captured_queries[0]["sql"]

    stored = say("the zQJx build")
    for query in ("qj", "QJ", "Qj"):
        assert [hit.message.pk for hit in message_search(person=owner, query=query)] == [stored.pk]


@only_postgresql
def test_a_deleted_or_edited_pair_stays_a_maybe_and_search_stays_right(
    team_chat, owner, without_test_pairs
):
    gone = say("a qj here")
    edited = say("another qj there")
    gone.delete()
    message_record_edit(message=edited, text="nothing now")
    # The table still says "maybe": the search looks, and finds nothing.
    assert stored_pairs("qj") == {"qj"}
    assert message_search(person=owner, query="qj") == []
