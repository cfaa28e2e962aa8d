"""Fixtures of the attachments' tests: blobs in a temporary folder, real file bytes."""

import struct
import zlib

import pytest

from chats.services import message_ingest


@pytest.fixture(autouse=True)
def _attachment_blobs_in_a_temporary_folder(settings, tmp_path_factory):
    """Files the tests store go to a folder of their own, never to var/."""
    settings.STORAGES = {
        **settings.STORAGES,
        "attachments": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path_factory.mktemp("attachment-blobs"))},
        },
    }


def png_bytes(width: int = 2, height: int = 2) -> bytes:
    """A valid PNG, built here (no fixture file): signature, IHDR, one IDAT, IEND."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


@pytest.fixture
def png():
    return png_bytes()


@pytest.fixture
def say(team_chat, owner):
    """Store a message in the team room as its owner; returns the message."""
    counter = iter(range(1, 10_000))

    def say(text: str = "here is a file", chat=None):
        chat = chat or team_chat
        result = message_ingest(
            channel=chat.channel,
            chat_id=chat.external_id,
            user_id=f"person-{owner.pk}",
            user_name=owner.username,
            message_id=f"m{next(counter)}",
            text=text,
            member=owner,
        )
        return result.message

    return say
