"""The chat actions registry the bridge asks (bots.chat_actions): each chat once, a failing
source or an unknown action skipped, at most MAX_PER_ROUND chats a round."""

import pytest

from bots.chat_actions import (
    MAX_PER_ROUND,
    PendingAction,
    pending_chat_actions,
    register_chat_action_source,
    unregister_chat_action_source,
)


@pytest.fixture
def sources(monkeypatch):
    from bots import chat_actions

    monkeypatch.setattr(chat_actions, "_sources", {})
    return register_chat_action_source


def test_each_chat_once_and_a_broken_source_skipped(sources):
    def broken():
        raise RuntimeError("database gone")

    sources("a", lambda: [PendingAction(1, None), PendingAction(1, None, "record_voice")])
    sources("broken", broken)
    sources("b", lambda: [PendingAction(2, 7, "launch_rocket"), PendingAction(2, 7)])
    assert pending_chat_actions() == [PendingAction(1, None), PendingAction(2, 7)]
    unregister_chat_action_source("a")
    assert pending_chat_actions() == [PendingAction(2, 7)]


def test_a_round_is_bounded(sources):
    sources("many", lambda: [PendingAction(n, None) for n in range(MAX_PER_ROUND * 3)])
    assert len(pending_chat_actions()) == MAX_PER_ROUND
