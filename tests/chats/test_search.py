"""Search over history: permissions, substring semantics (English and Chinese), literal
hostile queries, snippets. Runs on whichever backend DATABASE_URL names (CI: both)."""

import re

import pytest
from django.contrib.auth.models import AnonymousUser
from django.db import connection
from django.test.utils import CaptureQueriesContext

from chats.models import Message
from chats.search import (
    ELLIPSIS,
    MAX_TERMS,
    SearchHit,
    SearchQueryError,
    build_snippet,
    message_search,
    parse_search_query,
)
from chats.search_sources import search_text_sources, searches_sources
from chats.services import chat_reset, message_ingest

pytestmark = [pytest.mark.django_db, pytest.mark.storage]


def say(text, *, chat_id="team-room", user="u-olivia", role=Message.Role.USER, **extra):
    return message_ingest(
        channel="web", chat_id=chat_id, user_id=user, text=text, role=role, **extra
    ).message


def texts(hits):
    return [hit.message.text for hit in hits]


def expected_by_substring(messages, query):
    """The oracle: every term is a case-insensitive substring; newest first."""
    terms = [term.lower() for term in query.split()]
    return [
        m.text
        for m in sorted(messages, key=lambda m: m.pk, reverse=True)
        if all(term in m.text.lower() for term in terms)
    ]


@pytest.fixture
def outsider_chat(outsider):
    say("deploy the outsider's secret service on Friday", chat_id="oscar-room", member=outsider)
    return message_ingest(
        channel="web", chat_id="oscar-room", user_id="u-oscar", text="长期记忆 of oscar"
    ).message.chat


# --- Permissions ------------------------------------------------------------------------


def test_member_finds_messages_of_their_chat_newest_first(team_chat, owner, member):
    first = say("deploy the api on Monday")
    second = say("deploy the web app on Tuesday", user="u-marco")
    say("nothing relevant here")

    for person in (owner, member):
        hits = message_search(person=person, query="deploy")
        assert [hit.message.pk for hit in hits] == [second.pk, first.pk]
        assert all(isinstance(hit, SearchHit) for hit in hits)


def test_outsider_never_gets_a_hit_from_a_chat_they_are_not_in(
    team_chat, owner, outsider, outsider_chat
):
    say("deploy the team service on Friday")
    say("长期记忆管理 for the team")

    outsider_hits = message_search(person=outsider, query="deploy")
    assert [hit.message.chat_id for hit in outsider_hits] == [outsider_chat.pk]
    assert message_search(person=outsider, query="team") == []
    assert message_search(person=outsider, query="记忆 team") == []
    assert message_search(person=outsider, query="deploy", chat=team_chat) == []
    # ...and the other way round.
    assert all(
        hit.message.chat_id == team_chat.pk for hit in message_search(person=owner, query="deploy")
    )
    assert message_search(person=owner, query="oscar") == []


def test_anonymous_missing_and_inactive_people_get_nothing(team_chat, owner):
    say("deploy everything")
    assert message_search(person=None, query="deploy") == []
    assert message_search(person=AnonymousUser(), query="deploy") == []
    owner.is_active = False
    owner.save(update_fields=["is_active"])
    assert message_search(person=owner, query="deploy") == []


def test_chat_restriction(team_chat, owner, outsider_chat):
    in_team = say("deploy to staging")
    say("deploy to production", chat_id="side-room", member=owner)

    hits = message_search(person=owner, query="deploy", chat=team_chat)
    assert [hit.message.pk for hit in hits] == [in_team.pk]
    assert len(message_search(person=owner, query="deploy")) == 2
    # A chat the person cannot read yields nothing, even with matching messages in it.
    assert message_search(person=owner, query="deploy", chat=outsider_chat) == []
    assert message_search(person=owner, query="记忆", chat=outsider_chat) == []


# --- Query semantics --------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    ["记忆", "长期", "长期记忆", "记忆管", "记忆管理", "管理", "忆"],
)
def test_chinese_terms_match_inside_longer_words(team_chat, owner, query):
    say("我们讨论了长期记忆管理的方案")
    say("今天的会议纪要")
    assert texts(message_search(person=owner, query=query)) == ["我们讨论了长期记忆管理的方案"]


def test_chinese_two_character_term_with_no_match(team_chat, owner):
    say("我们讨论了长期记忆管理的方案")
    assert message_search(person=owner, query="麒麟") == []


@pytest.mark.parametrize("query", ["deploy", "DEPLOY", "Deploy", "dEpLoYmEnT", "ploy"])
def test_english_is_case_insensitive_substring(team_chat, owner, query):
    say("Deployment finished without errors")
    say("nothing to see")
    assert texts(message_search(person=owner, query=query)) == [
        "Deployment finished without errors"
    ]


def test_every_term_must_match(team_chat, owner):
    both = say("Deploy on Friday after the 记忆 review")
    say("deploy on Monday")
    say("Friday drinks")

    assert texts(message_search(person=owner, query="deploy friday")) == [both.text]
    assert texts(message_search(person=owner, query="friday   deploy ")) == [both.text]
    # Short (1-2 character) and long terms mixed.
    assert texts(message_search(person=owner, query="记忆 deploy")) == [both.text]
    assert texts(message_search(person=owner, query="on 记忆")) == [both.text]
    assert message_search(person=owner, query="deploy friday zeppelin") == []


@pytest.mark.parametrize("query", ["", "   ", "\n\t", "\x00"])
def test_empty_query_returns_nothing(team_chat, owner, query):
    say("anything at all")
    assert message_search(person=owner, query=query) == []


def test_terms_are_deduplicated_and_capped():
    assert parse_search_query("  Deploy deploy DEPLOY  记忆 ").highlight_terms == ["Deploy", "记忆"]
    assert len(parse_search_query(" ".join(f"t{i}" for i in range(MAX_TERMS))).clauses) == 8
    with pytest.raises(SearchQueryError, match="At most 8"):
        parse_search_query(" ".join(f"term{i}" for i in range(MAX_TERMS + 1)))
    assert parse_search_query("a\x00b").highlight_terms == ["a", "b"]


HOSTILE_CORPUS = [
    'He said "ship it" loudly',
    "glob * star and friends",
    "this OR that, no boolean here",
    "NEAR(alpha beta) is not a function",
    "we are 100% done",
    "snake_case_name everywhere",
    "path C:\\temp\\file.txt on windows",
    'a"b is a weird token',
    "(paren opened, never closed",
    "plain message without specials",
    "* AND - ^ : { } [ ] + col:",
]


@pytest.mark.parametrize(
    "query",
    [
        "or that",
        "NEAR(",
        "NEAR(alpha",
        "%",
        "100%",
        "_",
        "e_c",
        "\\",
        "\\temp\\",
        'a"b',
        "(",
        "(paren",
        ")",
        "AND",
        "^",
        "col:",
        "{ }",
        "'; DROP TABLE chats_message; --",
        "%%%",
        "___",
    ],
)
def test_text_the_syntax_does_not_claim_is_literal(team_chat, owner, query):
    stored = [say(text) for text in HOSTILE_CORPUS]
    hits = message_search(person=owner, query=query)
    assert texts(hits) == expected_by_substring(stored, query)
    assert Message.objects.count() == len(HOSTILE_CORPUS)


@pytest.mark.parametrize(
    ("query", "found"),
    [
        ('"ship it"', ['He said "ship it" loudly']),
        ('"OR"', ["this OR that, no boolean here"]),
        ('"col:"', ["* AND - ^ : { } [ ] + col:"]),
        ('"*"', ["* AND - ^ : { } [ ] + col:", "glob * star and friends"]),
        ('"-"', ["* AND - ^ : { } [ ] + col:"]),
        ('"NOT"', ["NEAR(alpha beta) is not a function"]),
    ],
)
def test_quoting_makes_operators_literal(team_chat, owner, query, found):
    for text in HOSTILE_CORPUS:
        say(text)
    assert texts(message_search(person=owner, query=query)) == found


def test_percent_and_underscore_are_not_wildcards(team_chat, owner):
    say("nothing special in this one")
    say("rate is 50% today")
    say("my_var is set")
    assert texts(message_search(person=owner, query="%")) == ["rate is 50% today"]
    assert texts(message_search(person=owner, query="_")) == ["my_var is set"]
    assert texts(message_search(person=owner, query="s_s")) == []


def test_same_results_as_the_substring_oracle_on_this_backend(team_chat, owner):
    """Both backends must agree with plain Python substring matching (hence with each other)."""
    corpus = [
        "Deploy the release on Friday",
        "部署新版本到生产环境",
        "长期记忆管理和短期记忆",
        "记忆",
        "Mixed 中文 and English: 部署 deployment",
        "École française, ÄRGER und Ärger",
        "tool output: exit code 0",
        "a",
        "ab",
        "the theme of these thesis",
        "x" * 500 + " needle " + "y" * 500,
    ]
    stored = [
        say(text, role=role) for text, role in zip(corpus, roles_cycle(len(corpus)), strict=True)
    ]
    queries = [
        "deploy",
        "部署",
        "部署 deploy",
        "记忆",
        "长期记忆",
        "短期",
        "école",
        "ÉCOLE",
        "ärger",
        "Ä",
        "the",
        "th",
        "these thesis",
        "a",
        "ab",
        "b",
        "exit code",
        "0",
        "needle",
        "xy",
        "中文 english",
    ]
    for query in queries:
        assert texts(message_search(person=owner, query=query, limit=50)) == (
            expected_by_substring(stored, query)
        ), query


def roles_cycle(count):
    roles = [Message.Role.USER, Message.Role.ASSISTANT, Message.Role.TOOL, Message.Role.SUMMARY]
    return [roles[i % len(roles)] for i in range(count)]


def test_markers_and_system_messages_are_never_returned(team_chat, owner):
    say("deploy as a user")
    say("deploy as the assistant", role=Message.Role.ASSISTANT)
    say("deploy tool output", role=Message.Role.TOOL)
    say("deploy summary of earlier turns", role=Message.Role.SUMMARY)
    say("deploy marker text", role=Message.Role.MARKER)
    say("deploy system prompt", role=Message.Role.SYSTEM)
    chat_reset(chat=team_chat)

    hits = message_search(person=owner, query="deploy")
    assert {hit.message.role for hit in hits} == {"user", "assistant", "tool", "summary"}
    assert message_search(person=owner, query="marker") == []
    assert message_search(person=owner, query="de") and all(
        hit.message.role != Message.Role.MARKER for hit in message_search(person=owner, query="de")
    )


def test_limit_keeps_the_newest(team_chat, owner):
    stored = [say(f"deploy number {i}") for i in range(30)]
    hits = message_search(person=owner, query="deploy", limit=5)
    assert [hit.message.pk for hit in hits] == [m.pk for m in reversed(stored[-5:])]
    assert len(message_search(person=owner, query="deploy")) == 20
    assert message_search(person=owner, query="deploy", limit=0) == []
    short = message_search(person=owner, query="de", limit=3)
    assert [hit.message.pk for hit in short] == [m.pk for m in reversed(stored[-3:])]


@pytest.mark.parametrize("query", ["deploy", "记忆", "deploy 记忆"])
def test_one_query_loads_hits_with_chat_and_actor(team_chat, owner, query):
    for i in range(5):
        say(f"deploy 记忆 {i}", user=f"u-{i}", user_name=f"Person {i}")
    with CaptureQueriesContext(connection) as queries:
        hits = message_search(person=owner, query=query)
        names = [(hit.message.actor.display_name, hit.message.chat.chat_key) for hit in hits]
    assert len(hits) == 5
    assert names[0] == ("Person 4", "web:team-room")
    # The hits with their chats and actors in one query, and a fixed number of others that
    # find their ids: on SQLite the indexes' cheap existence check; on PostgreSQL the
    # trigram index's candidate count (chats.search_postgresql), at most once a minute the
    # table's size, and the check that the history holds no more than the walk saw. Then,
    # for a query with a 3-character word, one lookup per search text source (files' text,
    # chats.search_sources); on PostgreSQL a second when its newest-first walk found too few.
    statements = [query["sql"] for query in queries.captured_queries]
    assert len([sql for sql in statements if "chats_actor" in sql]) == 1
    sources = len(search_text_sources()) if searches_sources(parse_search_query(query)) else 0
    per_source = 1 if connection.vendor == "sqlite" else 2
    assert len(statements) <= (2 if connection.vendor == "sqlite" else 4) + per_source * sources


def test_deleted_messages_disappear(team_chat, owner):
    gone = say("deploy the temporary thing")
    kept = say("deploy the permanent thing")
    gone.delete()
    assert [hit.message.pk for hit in message_search(person=owner, query="deploy")] == [kept.pk]


@pytest.mark.skipif(connection.vendor != "sqlite", reason="FTS5 is the SQLite index")
def test_sqlite_fts_index_stays_consistent_with_the_table(team_chat, owner):
    from chats.services import message_record_edit

    message = say("deploy the first version")
    say("长期记忆 second")
    message_record_edit(message=message, text="ship the second version")
    say("to be deleted").delete()
    with connection.cursor() as cursor:
        # Fails with "database disk image is malformed" if a trigger missed a change.
        cursor.execute(
            "INSERT INTO chats_message_fts(chats_message_fts) VALUES ('integrity-check')"
        )


def test_the_trigram_index_can_serve_the_query(team_chat, owner):
    say("deploy something 记忆")
    with CaptureQueriesContext(connection) as queries:
        message_search(person=owner, query="Deploy 记忆")
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            sql = queries.captured_queries[-1]["sql"]
            cursor.execute("EXPLAIN QUERY PLAN " + sql)
            plan = " ".join(str(row) for row in cursor.fetchall())
            assert "VIRTUAL TABLE INDEX" in plan
            return
        # PostgreSQL: one statement counts the trigram index's candidates (after the pair
        # index's check for 记忆). Every 3-character term is a predicate the index serves;
        # the 2-character one is kept away from it (the index would read all of itself).
        [sql] = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("EXPLAIN")]
        assert set(re.findall(r"m\.text I?LIKE '(?:[^']|'')*'", sql)) == {"m.text ILIKE '%Deploy%'"}
        assert "strpos(m.text, '记忆')" in sql
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute("EXPLAIN SELECT m.id FROM chats_message m WHERE m.text ILIKE '%Deploy%'")
        plan = " ".join(row[0] for row in cursor.fetchall())
        assert "Bitmap Index Scan on chats_message_text_trgm" in plan


# --- Snippets and highlights -------------------------------------------------------------


def assert_highlights_match(hit_or_pair, terms):
    snippet, highlights = (
        (hit_or_pair.snippet, hit_or_pair.highlights)
        if isinstance(hit_or_pair, SearchHit)
        else hit_or_pair
    )
    lowered = [term.lower() for term in terms]
    for start, end in highlights:
        assert 0 <= start < end <= len(snippet)
        assert snippet[start:end].lower() in lowered or any(
            term in snippet[start:end].lower() for term in lowered
        )
    return snippet, highlights


def test_snippet_is_cut_around_the_first_match_with_ellipses(team_chat, owner):
    text = ("lorem ipsum dolor sit amet " * 20) + "the Deployment happened " + ("tail " * 60)
    say(text)
    [hit] = message_search(person=owner, query="deploy")
    assert hit.snippet.startswith(ELLIPSIS) and hit.snippet.endswith(ELLIPSIS)
    assert len(hit.snippet) <= 162
    [(start, end)] = hit.highlights
    assert hit.snippet[start:end] == "Deploy"
    assert hit.message.text == text


def test_short_message_snippet_is_whole_text_without_ellipses(team_chat, owner):
    say("Deploy\n\non   Friday")
    [hit] = message_search(person=owner, query="friday deploy")
    assert hit.snippet == "Deploy on Friday"
    assert hit.highlights == [(0, 6), (10, 16)]


def test_chinese_snippet_highlights(team_chat, owner):
    say("背景" * 100 + "我们讨论了长期记忆管理的方案" + "结尾" * 100)
    [hit] = message_search(person=owner, query="记忆 方案")
    snippet, highlights = assert_highlights_match(hit, ["记忆", "方案"])
    assert [snippet[s:e] for s, e in highlights] == ["记忆", "方案"]
    assert snippet.startswith(ELLIPSIS) and snippet.endswith(ELLIPSIS)


def test_every_occurrence_in_the_snippet_is_highlighted_and_overlaps_merge():
    snippet, highlights = build_snippet("abcd xx ABCD", ["abc", "bcd"])
    assert snippet == "abcd xx ABCD"
    assert highlights == [(0, 4), (8, 12)]


def test_match_near_the_end_keeps_a_full_window():
    text = "word " * 100 + "needle"
    snippet, highlights = build_snippet(text, ["needle"])
    assert snippet.startswith(ELLIPSIS) and not snippet.endswith(ELLIPSIS)
    assert snippet.endswith("needle")
    assert len(snippet) >= 150
    [(start, end)] = highlights
    assert snippet[start:end] == "needle"


def test_very_long_term_is_kept_whole():
    term = "z" * 300
    snippet, highlights = build_snippet("a " * 200 + term + " b" * 200, [term])
    [(start, end)] = highlights
    assert snippet[start:end] == term


def test_hostile_terms_highlight_literally(team_chat, owner):
    say('cost is 100% of (a"b) budget')
    [hit] = message_search(person=owner, query='% a"b (')
    snippet, highlights = assert_highlights_match(hit, ["%", 'a"b', "("])
    assert [snippet[s:e] for s, e in highlights] == ["%", "(", 'a"b']
