"""When a person's own words approve a change about them at once."""

import pytest

from memory.policy import asked_for, asked_to_forget, asked_to_remember


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
