"""Helpers shared by the knowledge tests: a collection with documents written through the
real indexing (splitting, the offline embeddings model, both full-text indexes)."""

import hashlib

from chats.agent.registry import TurnContext
from chats.services import message_ingest
from knowledge.indexing import document_store_text
from knowledge.models import Document
from knowledge.services import collection_create

RUNBOOK = """# On-call runbook

## Disk
### Full disk
When a disk is full, find the largest folders with `du -xh / | sort -h | tail`, remove
rotated logs under /var/log, and expand the volume if it fills again within a week.

### Slow disk
Check iostat for queue depth above 8; page the storage team if latency stays above 50 ms.

## Certificates
Renew TLS certificates with certbot renew; they expire every 90 days.

# 运维手册
## 磁盘已满
磁盘已满时，先用 du 找出最大的目录，删除 /var/log 下轮转过的旧日志，必要时扩容。

## 证书续期
证书每九十天过期一次，用 certbot renew 续期。
"""


def add_document(collection, path: str, text: str) -> Document:
    document = Document.objects.create(
        collection=collection, path=path, source=Document.Source.UPLOAD
    )
    return document_store_text(
        document=document,
        text=text,
        paged=False,
        media_type="text/markdown",
        page_count=1,
        content_hash=hashlib.sha256(text.encode()).hexdigest(),
        size=len(text.encode()),
    )


def runbooks(*, readers=(), everyone=False, name="Runbooks", by=None):
    collection = collection_create(name=name, by=by, readers=readers, everyone_may_read=everyone)
    add_document(collection, "oncall/runbook.md", RUNBOOK)
    return collection


def web_turn(chat, person, text="what does the runbook say about a full disk?"):
    message = message_ingest(
        channel=chat.channel,
        chat_id=chat.external_id,
        user_id=str(person.pk),
        user_name=person.get_username(),
        text=text,
        person=person,
    ).message
    return TurnContext(chat=chat, trigger=message, actor=message.actor, person=person)
