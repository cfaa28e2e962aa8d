import itertools

import pytest

from chats.keys import InvalidKey, make_actor_key, make_chat_key, parse_chat_key


def test_chat_key_shapes():
    assert make_chat_key("telegram", -1001234) == "telegram:-1001234"
    assert make_chat_key("telegram", -1001234, 7) == "telegram:-1001234:topic:7"
    assert make_actor_key("telegram", -100, 42) == "telegram:-100:42"


def test_chat_key_is_injective_for_ids_that_contain_separators_or_look_like_fields():
    ids = ["42", "42:topic:7", "42:topic", "topic", "42%3Atopic%3A7", "a:b", "a%3Ab", "%", ":"]
    threads = [None, "7", "7:topic:8", "%3A"]
    triples = [
        (channel, chat_id, thread)
        for channel in ("api", "telegram")
        for chat_id, thread in itertools.product(ids, threads)
    ]
    keys = [make_chat_key(*triple) for triple in triples]
    assert len(set(keys)) == len(triples)
    for triple, key in zip(triples, keys, strict=True):
        parts = parse_chat_key(key)
        assert (parts.channel, parts.chat_id, parts.thread_id) == triple


@pytest.mark.parametrize(
    "channel, chat_id",
    [
        ("", "1"),
        ("Tele:gram", "1"),
        ("api", ""),
        ("api", "  "),
        ("api", "a\nb"),
        ("api", None),
        ("api", ["1"]),
        ("api", True),
        ("api", "x" * 256),
    ],
)
def test_invalid_parts_are_rejected(channel, chat_id):
    with pytest.raises(InvalidKey):
        make_chat_key(channel, chat_id)


@pytest.mark.parametrize("key", ["api", "api:1:2", "api:1:topic", "api:a:b:c:d", "api:1%3a2"])
def test_parse_rejects_keys_make_never_makes(key):
    with pytest.raises(InvalidKey):
        parse_chat_key(key)
