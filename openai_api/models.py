"""How conversations of OpenAI-compatible clients map onto the hub's chats.

Such a client resends the whole conversation at every call. Each prefix of it has a digest
(a hash chain over its user and assistant messages); `ConversationPrefix` remembers which of
the person's chats holds the conversation up to that prefix, and `Conversation.tip_digest`
which prefix that chat has reached. A request whose longest known prefix is its chat's tip
continues that chat (only the new tail is stored); one whose prefix is known but behind the
tip (an edit, a regenerate) forks a new chat from it (docs/OPENAI.md).
"""

from django.conf import settings
from django.db import models
from django.utils import timezone


class Conversation(models.Model):
    """An `openai` chat of one person: how far it got, and the note their client sent."""

    chat = models.OneToOneField(
        "chats.Chat", on_delete=models.CASCADE, related_name="openai_conversation"
    )
    person = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="openai_conversations"
    )
    tip_digest = models.CharField(max_length=64, blank=True, default="")
    system_note = models.TextField(blank=True, default="")
    forked_from = models.ForeignKey(
        "chats.Chat", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"OpenAI conversation of {self.person} in {self.chat_id}"


class ConversationPrefix(models.Model):
    """One prefix of a person's client conversation, and the chat that holds it (the newest
    fork when several do)."""

    person = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    digest = models.CharField(max_length=64)
    chat = models.ForeignKey("chats.Chat", on_delete=models.CASCADE, related_name="+")
    length = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["person", "digest"], name="openai_prefix_unique")
        ]

    def __str__(self) -> str:
        return f"{self.digest[:12]}… ({self.length} messages) → chat {self.chat_id}"


class StoredResponse(models.Model):
    """A `/v1/responses` answer: its id, so a later request can continue after it
    (`previous_response_id`), for its person only."""

    response_id = models.CharField(max_length=64, unique=True)
    person = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    chat = models.ForeignKey("chats.Chat", on_delete=models.CASCADE, related_name="+")
    turn = models.ForeignKey("chats.Turn", on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.response_id} (turn {self.turn_id})"
