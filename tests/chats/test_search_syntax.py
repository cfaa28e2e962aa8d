"""The search syntax (chats.search_query) through every entry point: each operator and filter
in English and Chinese on this backend (CI: SQLite and PostgreSQL), the readers rule, the
messages for malformed queries, and that cheap misses never hide a word just stored."""

import json
from datetime import UTC, datetime

import pytest

from chats.agent.builtin_tools import SESSION_SEARCH
from chats.agent.registry import TurnContext
from chats.agent.tools import execute_tool_call
from chats.models import Message
from chats.search import SearchQueryError, chat_message_search, message_search
from chats.search_query import parse_search_query
from chats.services import message_ingest
from tests.chats.dashboard_helpers import login

pytestmark = [pytest.mark.django_db, pytest.mark.storage]


def say(text, *, chat_id="team-room", user="u-olivia", name="Olivia", channel="web", **extra):
    return message_ingest(
        channel=channel, chat_id=chat_id, user_id=user, user_name=name, text=text, **extra
    ).message


def found(person, query, **kwargs):
    return [hit.message.text for hit in message_search(person=person, query=query, **kwargs)]


CORPUS = [
    "Deploy the release on Friday",
    "the redeploy failed twice",
    "deployment notes for the team",
    "ship it today, said the captain",
    "today we ship it",
    "部署新版本到生产环境",
    "长期记忆管理和短期记忆",
    "记忆 and deploy together",
    "draft: deploy plan",
]


@pytest.fixture
def corpus(team_chat):
    return [say(text) for text in CORPUS]


def newest_first(*texts):
    return sorted(texts, key=CORPUS.index, reverse=True)


# --- operators ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # words: every one, substrings, any case
        ("deploy", [t for t in CORPUS if "deploy" in t.lower()]),
        ("DEPLOY friday", ["Deploy the release on Friday"]),
        ("记忆", ["长期记忆管理和短期记忆", "记忆 and deploy together"]),
        ("记忆 deploy", ["记忆 and deploy together"]),
        # "exact phrase": the words together, in order
        ('"ship it today"', ["ship it today, said the captain"]),
        ('"ship it"', ["ship it today, said the captain", "today we ship it"]),
        ('"it ship"', []),
        ('"生产环境"', ["部署新版本到生产环境"]),
        ('"短期记忆"', ["长期记忆管理和短期记忆"]),
        ('"新版本 到"', []),
        # OR: either side; binds tighter than the implicit AND
        ("captain OR friday", ["Deploy the release on Friday", "ship it today, said the captain"]),
        (
            "部署 OR 记忆",
            ["部署新版本到生产环境", "长期记忆管理和短期记忆", "记忆 and deploy together"],
        ),
        ("deploy 记忆 OR friday", ["Deploy the release on Friday", "记忆 and deploy together"]),
        ("zz OR 生产", ["部署新版本到生产环境"]),
        # -word / NOT word: without it
        ("deploy -friday", [t for t in CORPUS if "deploy" in t.lower() and "Friday" not in t]),
        (
            "deploy NOT draft -team",
            [
                "Deploy the release on Friday",
                "the redeploy failed twice",
                "记忆 and deploy together",
            ],
        ),
        ("记忆 -deploy", ["长期记忆管理和短期记忆"]),
        ("记忆 NOT 短期", ["记忆 and deploy together"]),
        ('deploy -"deploy plan"', [t for t in CORPUS if "deploy" in t.lower()][:4]),
        ("deploy -ed", [t for t in CORPUS if "deploy" in t.lower() and "ed" not in t]),
        # prefix*: where a word starts (redeploy does not start with deploy)
        ("deploy*", [t for t in CORPUS if "deploy" in t.lower() and "redeploy" not in t]),
        ("dep*", [t for t in CORPUS if "deploy" in t.lower() and "redeploy" not in t]),
        ("de* fri*", ["Deploy the release on Friday"]),
        ("capt* OR fri*", ["Deploy the release on Friday", "ship it today, said the captain"]),
        ("记忆*", ["长期记忆管理和短期记忆", "记忆 and deploy together"]),
        ("部署* 生产*", ["部署新版本到生产环境"]),
    ],
)
def test_each_operator_in_both_languages(corpus, owner, query, expected):
    assert found(owner, query, limit=50) == newest_first(*expected), query


def test_the_same_results_in_one_chat_and_for_the_agent(corpus, owner, team_chat):
    for query in ('"ship it"', "部署 OR 记忆", "deploy -friday", "dep*"):
        everywhere = found(owner, query)
        assert found(owner, query, chat=team_chat) == everywhere
        hits = chat_message_search(chat=team_chat, query=query)
        assert [hit.message.text for hit in hits] == everywhere


def test_highlights_mark_phrases_and_alternatives(corpus, owner):
    [hit] = message_search(person=owner, query='"ship it today" OR zzz')
    assert hit.snippet[slice(*hit.highlights[0])] == "ship it today"
    [hit] = message_search(person=owner, query="生产 OR zzz")
    assert hit.snippet[slice(*hit.highlights[0])] == "生产"


# --- filters ------------------------------------------------------------------------------


@pytest.fixture
def spread(owner, team_chat):
    """Messages by two authors across two chats and two channels on three days."""
    from chats.services import chat_member_ensure

    rows = [
        say("launch plan 发布计划 draft", name="Olivia Stone"),
        say("launch checklist 发布清单", user="u-marco", name="Marco Rossi"),
        say("launch from telegram 发布", channel="telegram", chat_id=-77, user="9", name="Tg Ann"),
        say("launch notes in ops 发布", chat_id="ops-room", name="Olivia Stone"),
    ]
    for message in rows[2:]:
        message.chat.title = {"telegram": "Tg group", "web": "Ops room"}[message.chat.channel]
        message.chat.save(update_fields=["title"])
        chat_member_ensure(chat=message.chat, person=owner)
    days = ["2026-01-10", "2026-01-20", "2026-01-20", "2026-02-01"]
    for message, day in zip(rows, days, strict=True):
        moment = datetime.fromisoformat(day + "T12:00").replace(tzinfo=UTC)
        Message.objects.filter(pk=message.pk).update(created_at=moment)
    return [message.text for message in rows]


@pytest.mark.parametrize(
    ("query", "indexes"),
    [
        ("launch from:olivia", [0, 3]),
        ("发布 from:marco", [1]),
        ('发布 from:"olivia stone"', [0, 3]),
        ("launch from:olivia from:marco", [0, 1, 3]),
        ("launch from:nobody", []),
        ("launch in:ops", [3]),
        ('发布 in:"team room"', [0, 1]),
        ("launch in:web:team-room", [0, 1]),
        ("发布 channel:telegram", [2]),
        ("launch channel:WEB", [0, 1, 3]),
        ("launch after:2026-01-10", [1, 2, 3]),
        ("发布 before:2026-01-20", [0]),
        ("launch after:2026-01-10 before:2026-02-01", [1, 2]),
        ("from:olivia", [0, 3]),
        ("from:olivia -draft", [3]),
        ("launch from:olivia in:ops channel:web after:2026-01-31", [3]),
    ],
)
def test_each_filter(spread, owner, query, indexes):
    assert found(owner, query) == [spread[i] for i in reversed(indexes)], query


def test_filters_never_widen_what_a_person_may_read(spread, outsider, member):
    # The member reads the team room only; the telegram and ops chats are the owner's.
    assert found(member, "launch channel:telegram") == []
    assert found(member, "in:ops") == []
    assert found(outsider, "from:olivia") == []


# --- the readers rule, at every entry point -------------------------------------------------


@pytest.fixture
def secret(team_chat, outsider):
    say("the nightly falcon rollout 秘密计划 is ready")
    say("nothing to see here", chat_id="oscar-room", member=outsider)


SECRET_QUERIES = ['"falcon rollout"', "falc*", "falcon OR 秘密", '"秘密计划"', "falcon -zebra"]


@pytest.mark.parametrize("query", SECRET_QUERIES)
def test_a_phrase_only_in_an_unreadable_chat_finds_nothing(secret, owner, outsider, query):
    assert found(owner, query) == ["the nightly falcon rollout 秘密计划 is ready"]
    assert found(outsider, query) == []


@pytest.mark.parametrize("query", SECRET_QUERIES)
def test_the_search_page_keeps_the_readers_rule(secret, owner, outsider, query):
    assert "nightly" in login(owner).get("/search", {"q": query}).content.decode()
    page = login(outsider).get("/search", {"q": query}).content.decode()
    assert "nightly" not in page and "No messages in your chats match" in page


@pytest.mark.parametrize("query", SECRET_QUERIES)
def test_the_api_keeps_the_readers_rule(secret, owner, outsider, api_for, query):
    owner_results = api_for(owner).get("/api/v1/search", {"q": query}).json()["results"]
    assert [r["message"]["text"] for r in owner_results] == [
        "the nightly falcon rollout 秘密计划 is ready"
    ]
    response = api_for(outsider).get("/api/v1/search", {"q": query})
    assert response.status_code == 200 and response.json()["results"] == []


@pytest.mark.parametrize("query", SECRET_QUERIES)
def test_session_search_keeps_the_readers_rule(secret, outsider, query):
    own = say("what about it?", chat_id="oscar-dm", user="u-oscar", person=outsider)
    own.chat.memberships.get_or_create(person=outsider)
    context = TurnContext(chat=own.chat, trigger=own, person=outsider)
    arguments = json.dumps({"query": query})
    result = execute_tool_call(
        {"session_search": SESSION_SEARCH}, "session_search", arguments, context
    )
    assert not result.is_error
    assert "falcon" not in result.content and '"count": 0' in result.content


# --- malformed queries --------------------------------------------------------------------


MALFORMED = [
    ('"unclosed phrase', "never closed"),
    ('deploy "', "never closed"),
    ('""', "empty phrase"),
    ("OR", "OR needs a word on each side"),
    ("deploy OR", "OR needs a word on each side"),
    ("OR deploy", "OR needs a word on each side"),
    ("deploy OR OR ship", "OR needs a word on each side"),
    ("NOT", "NOT needs a word after it"),
    ("deploy NOT", "NOT needs a word after it"),
    ("NOT OR x", "NOT must be followed by a word"),
    ("-", "A lone -"),
    ("*", "`*` needs the start of a word"),
    ("-draft", "cannot only exclude"),
    ("NOT 草稿 -draft", "cannot only exclude"),
    ("color:red", "Unknown filter color:"),
    ('url:"x"', "Unknown filter url:"),
    ("deploy from:", "from: needs a value"),
    ("before:2026-13-01", "not a real date"),
    ("after:yesterday", "YYYY-MM-DD"),
    ("before:2026-1-5", "YYYY-MM-DD"),
    ("deploy after:2026-02-01 before:2026-02-02", "after: must be a day before before:"),
    (" ".join(f"w{i}" for i in range(9)), "At most 8"),
    ("deploy after:9999-12-31", "out of range"),
]


@pytest.mark.parametrize(("query", "message"), MALFORMED)
def test_a_malformed_query_says_what_was_wrong(team_chat, owner, query, message):
    with pytest.raises(SearchQueryError, match=message.replace("*", r"\*")):
        message_search(person=owner, query=query)
    with pytest.raises(SearchQueryError, match=message.replace("*", r"\*")):
        chat_message_search(chat=team_chat, query=query)


def test_a_day_at_the_end_of_the_calendar_is_a_400_not_a_500(team_chat, owner, api_for):
    # after:9999-12-31 means "from 10000-01-01", which no datetime holds.
    response = api_for(owner).get("/api/v1/search", {"q": "deploy after:9999-12-31"})
    assert response.status_code == 400
    assert "out of range" in response.json()["error"]["message"]


def test_a_first_day_east_of_utc_is_refused_not_a_500(settings, team_chat, owner):
    # 0001-01-01 00:00 in Tokyo is in year 0 in UTC, where the database stores times.
    settings.TIME_ZONE = "Asia/Tokyo"
    with pytest.raises(SearchQueryError, match="out of range"):
        message_search(person=owner, query="deploy before:0001-01-01")


@pytest.mark.parametrize(("query", "message"), MALFORMED[:6] + MALFORMED[12:18])
def test_the_search_page_shows_the_message(team_chat, owner, query, message):
    response = login(owner).get("/search", {"q": query})
    assert response.status_code == 200
    page = response.content.decode()
    assert 'class="search-error"' in page and "Cannot search for" in page
    from django.utils.html import escape

    assert escape(message) in page


@pytest.mark.parametrize(("query", "message"), MALFORMED[:6] + MALFORMED[12:18])
def test_the_api_answers_400_with_the_message(team_chat, owner, api_for, query, message):
    response = api_for(owner).get("/api/v1/search", {"q": query})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_query" and error["field"] == "q"
    assert message in error["message"]


@pytest.mark.parametrize(("query", "message"), MALFORMED[:6] + MALFORMED[12:18])
def test_session_search_returns_the_message_as_a_tool_error(team_chat, owner, query, message):
    own = say("where was that?", chat_id="olivia-dm", person=owner, member=owner)
    context = TurnContext(chat=own.chat, trigger=own, person=owner)
    arguments = json.dumps({"query": query})
    result = execute_tool_call(
        {"session_search": SESSION_SEARCH}, "session_search", arguments, context
    )
    assert result.is_error
    assert "search query not understood" in result.content and message in result.content


def test_the_search_page_documents_the_syntax(owner):
    page = login(owner).get("/search").content.decode()
    assert "Search syntax" in page
    for example in ('"ship it today"', "deploy OR release", "deploy -draft", "migrat*"):
        assert example in page
    for name in ("from:", "in:", "channel:", "after:", "before:"):
        assert name in page


# --- cheap misses ---------------------------------------------------------------------------


def test_a_word_stored_a_moment_ago_is_not_a_cheap_miss(team_chat, owner):
    assert found(owner, "zeppelinx") == []
    assert found(owner, "zeppelinx OR qwertyuiop") == []
    say("the zeppelinx has landed")
    assert found(owner, "zeppelinx") == ["the zeppelinx has landed"]
    assert found(owner, "qwertyuiop OR zeppelinx") == ["the zeppelinx has landed"]
    say("麒麟出现了")
    assert found(owner, "麒麟出现") == ["麒麟出现了"]


def test_an_edited_or_deleted_word_is_gone_from_the_cheap_check(team_chat, owner):
    message = say("the albatross circles")
    assert found(owner, "albatross") == ["the albatross circles"]
    Message.objects.filter(pk=message.pk).update(text="the heron circles")
    assert found(owner, "albatross") == [] and found(owner, "heron") == ["the heron circles"]
    Message.objects.filter(pk=message.pk).delete()
    assert found(owner, "heron") == []


def test_a_word_only_in_an_unreadable_chat_still_finds_nothing(team_chat, owner, outsider):
    # The cheap check sees every chat; it only ever says "nothing", never "something".
    say("the kestrel report", chat_id="oscar-room", member=outsider)
    assert found(owner, "kestrel") == []


def test_the_parser_reads_the_documented_examples():
    parsed = parse_search_query(
        'deploy "exact phrase" a OR b -draft NOT wip migrat* 记忆* from:olivia '
        'in:"team room" channel:Telegram after:2026-01-31 before:2026-03-01'
    )
    clauses = [[(t.text, t.prefix) for t in clause] for clause in parsed.clauses]
    assert clauses == [
        [("deploy", False)],
        [("exact phrase", False)],
        [("a", False), ("b", False)],
        [("migrat", True)],
        [("记忆", False)],
    ]
    assert [t.text for t in parsed.excluded] == ["draft", "wip"]
    assert parsed.authors == ["olivia"] and parsed.chats == ["team room"]
    assert parsed.channels == ["telegram"]
    assert parsed.after.date().isoformat() == "2026-02-01"
    assert parsed.before.date().isoformat() == "2026-03-01"


@pytest.mark.parametrize(
    ("pair", "other", "text"),
    [
        ("猫狗", "狐狸", "猫狗"),
        ("猫狗", "狐狸", "我的猫狗"),
        ("猫狗", "狐狸", "猫狗好"),
        ("猫狗", "狐狸", "有猫狗的家"),
        ("猫狗", "狐狸", "cats 猫狗"),
        ("猫狗", "狐狸", "猫狗\n"),
        ("qz", "xj", "QZ"),
        ("qz", "xj", "the Qz"),
        ("qz", "xj", "aqZb"),
        ("qz", "xj", "qZ first"),
    ],
)
def test_a_two_character_word_stored_a_moment_ago_is_found(team_chat, owner, pair, other, text):
    # Wherever the pair sits (the whole text, its end, its start, the middle), in any case,
    # the index check of migration 0009 knows it at once.
    assert found(owner, pair) == []
    assert found(owner, f"{pair} OR {other}") == []
    say(text)
    assert found(owner, pair) == [text]
    assert found(owner, pair.upper()) == [text]
    assert found(owner, f"{other} OR {pair}") == [text]


def test_an_edited_two_character_word_is_found_and_the_old_one_is_not(team_chat, owner):
    message = say("只有狐狸")
    Message.objects.filter(pk=message.pk).update(text="只有猫狗")
    assert found(owner, "猫狗") == ["只有猫狗"] and found(owner, "狐狸") == []


def test_the_cheap_checks_are_answered_by_indexes(team_chat, owner):
    from django.db import connection

    from chats.search import _exists_long, _exists_pair
    from chats.search_query import Term

    say("猫狗 and quokka")
    for sql, params in (_exists_pair("猫狗"), _exists_long([[Term("quokka")]])):
        with connection.cursor() as cursor:
            if connection.vendor == "sqlite":
                cursor.execute(f"EXPLAIN QUERY PLAN SELECT {sql}", params)
                plan = " ".join(str(row[-1]) for row in cursor.fetchall())
                assert (
                    "SCAN chats_message " not in plan + " " and "SCAN chats_message\n" not in plan
                )
                assert "VIRTUAL TABLE" in plan or "chats_message_text_tail" in plan
            else:
                cursor.execute("SET LOCAL enable_seqscan = off")
                cursor.execute(f"EXPLAIN SELECT {sql}", params)
                plan = " ".join(row[0] for row in cursor.fetchall())
                assert "Seq Scan" not in plan, plan
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute(
                "EXPLAIN QUERY PLAN SELECT 1 FROM chats_message WHERE substr(text, -2) = '猫狗'"
            )
            assert "chats_message_text_tail" in " ".join(str(r[-1]) for r in cursor.fetchall())
