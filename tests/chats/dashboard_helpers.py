"""Helpers shared by the dashboard tests: a logged-in client, page URLs, quick messages."""

from urllib.parse import quote

from django.test import Client

from chats.models import Message
from chats.services import message_ingest


def login(person, **kwargs):
    client = Client(**kwargs)
    client.force_login(person)
    return client


def page_url(chat):
    return f"/chats/{quote(chat.chat_key, safe='/:')}/"


def say(chat, text, *, user="ana", name="Ana", role=Message.Role.USER, **extra):
    return message_ingest(
        channel=chat.channel,
        chat_id=chat.external_id,
        user_id=user if role == Message.Role.USER else None,
        user_name=name if role == Message.Role.USER else "",
        text=text,
        role=role,
        **extra,
    ).message
