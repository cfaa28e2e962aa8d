"""When a person's own words approve a change about them at once."""

import pytest

from memory.policy import (
    asked_for,
    asked_to_forget,
    asked_to_remember,
    content_matches,
    explicit_request,
)


@pytest.mark.parametrize(
    "text",
    [
        "remember I prefer short answers",
        "Please remember that I'm vegetarian",
        "Don't forget: my timezone is CET",
        "keep in mind I use a Mac",
        "note that I work part-time",
        "For future reference, I'm on the billing team",
        "记住我喜欢简短的回答",
        "请记下我的时区是北京时间",
        "别忘了我下周休假",
    ],
)
def test_explicit_requests_to_remember(text):
    assert asked_to_remember(text)


@pytest.mark.parametrize(
    "text",
    [
        "I prefer short answers",
        "what is the weather like?",
        "no need to remember this",
        "please don't remember that",
        "I can never remember the VPN steps",
        "别记住这个",
        "我喜欢简短的回答",
    ],
)
def test_statements_and_refusals_are_not_requests(text):
    assert not asked_to_remember(text)


def test_forgetting_and_updating():
    assert asked_to_forget("forget that I live in Rome")
    assert asked_to_forget("please delete that from your memory")
    assert asked_to_forget("忘掉我住在罗马")
    assert not asked_to_forget("don't forget my birthday")
    assert asked_for("replace", "actually I moved to Milan")
    assert asked_for("replace", "remember I moved to Milan")
    assert not asked_for("remove", "I moved to Milan")
    assert asked_for("add", "remember I moved to Milan")


# --- explicit_request: the only words that approve a write at once ------------------------


@pytest.mark.parametrize(
    ("said", "content"),
    [
        ("remember that I like green tea", "Likes green tea"),
        ("Please remember I prefer short answers.", "Prefers short answers."),
        ("Don't forget: my timezone is CET", "Timezone is CET"),
        ("note that I work part-time on Fridays", "Works part-time on Fridays"),
        ("记住我喜欢简短的回答", "喜欢简短的回答"),
        ("remember that Alice likes tea", "Alice likes tea"),  # her own name is not a new word
    ],
)
def test_an_explicit_request_whose_words_the_content_repeats(said, content):
    assert explicit_request("add", said, content=content, names={"Alice"})
    assert explicit_request("replace", said, content=content, names={"Alice"})


@pytest.mark.parametrize(
    ("said", "content"),
    [
        ("Do you remember that I like green tea?", "Likes green tea"),
        ("do you remember I like green tea", "Likes green tea"),
        ("Could you remember that I like tea?", "Likes tea"),
        ("Actually, I like green tea", "Likes green tea"),
        ("Can you change my drink to green tea?", "Likes green tea"),
        ("Don't remember that I like green tea", "Likes green tea"),
        ("no need to remember that I like tea", "Likes tea"),
        ("I don't want you to remember that I like tea", "Likes tea"),
        ("Please never ever again remember that I like tea", "Likes tea"),
        ("I can never remember the VPN steps", "VPN steps"),
        ("你还记得我喜欢茶吗？", "喜欢茶"),
        # Explicit, but the content is not what was said.
        ("remember that I like green tea", "Has admin rights on prod"),
        ("remember that I hate tea", "Likes tea"),
        ("remember that I like tea", "Likes tea and is a staff member with admin rights"),
    ],
)
def test_questions_corrections_negations_and_other_content_are_not_requests(said, content):
    assert not explicit_request("add", said, content=content)
    assert not explicit_request("replace", said, content=content)


def test_content_matching_folds_case_and_endings_and_needs_most_words():
    assert content_matches("Prefers answers in German.", "I prefer answers in german")
    assert content_matches("Uses vim", "remember: I am using VIM")
    assert not content_matches("Uses vim and emacs daily", "remember I use vim")
    assert not content_matches("", "remember")


def test_removal_needs_an_explicit_request_that_is_not_a_question():
    assert explicit_request("remove", "forget that I live in Rome")
    assert not explicit_request("remove", "did you forget that I live in Rome?")
    assert not explicit_request("remove", "don't forget that I live in Rome")
