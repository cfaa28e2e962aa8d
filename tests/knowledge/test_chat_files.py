"""A chat's file into a collection: the control under the file for maintainers, and the
`knowledge_add` tool ("add this to the Runbooks collection") that succeeds only when the
person asking maintains the collection. Refused: another member who only reads it, an
outsider, a maintainer who does not read the chat, an integration's unlinked user, and a
background review."""

import pytest
from django.urls import reverse

from attachments.models import Attachment
from attachments.services import attachment_store
from chats.agent.registry import ToolError, TurnContext
from chats.services import chat_get_or_create, message_ingest
from knowledge import chat_files
from knowledge.chat_files import KNOWLEDGE_ADD, add_tools
from knowledge.models import Document, KnowledgeEvent
from knowledge.selectors import search_for_person
from tests.knowledge.helpers import RUNBOOK, runbooks, web_turn

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _blobs(settings, tmp_path):
    settings.STORAGES = {
        **settings.STORAGES,
        "attachments": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "blobs")},
        },
    }


@pytest.fixture
def inline(monkeypatch, django_capture_on_commit_callbacks):
    from knowledge import tasks

    monkeypatch.setattr(
        chat_files, "_enqueue", lambda d, a, b: chat_files.index_attachment(d, a, b)
    )
    monkeypatch.setattr(tasks.embed_missing, "delay", lambda: tasks.embed_missing())
    return django_capture_on_commit_callbacks


def posted_file(chat, person, name="disk-runbook.md", text=RUNBOOK) -> Attachment:
    message = message_ingest(
        channel="web",
        chat_id=chat.external_id,
        user_id=str(person.pk),
        user_name=person.get_username(),
        text="here is the runbook",
        person=person,
    ).message
    attachment = attachment_store(message=message, name=name, data=text.encode())
    # What the attachments' processing leaves on a read text file.
    Attachment.objects.filter(pk=attachment.pk).update(
        state=Attachment.State.READY, extracted_text=text
    )
    attachment.refresh_from_db()
    return attachment


def test_a_maintainer_adds_a_chat_file_from_its_card(client, owner, member, team_chat, inline):
    collection = runbooks(readers=[member], by=owner, name="Ops docs")
    attachment = posted_file(team_chat, member)
    page_url = reverse("chat_page", args=[team_chat.chat_key])
    client.force_login(member)  # reads the collection, maintains nothing
    assert "knowledge-add-file" not in client.get(page_url).content.decode()
    client.force_login(owner)
    assert "knowledge-add-file" in client.get(page_url).content.decode()
    with inline(execute=True):
        response = client.post(
            reverse("knowledge_add_file"),
            {"attachment": attachment.pk, "collection": collection.pk},
            HTTP_HX_REQUEST="true",
        )
    assert response.status_code == 200 and b"chat-files/disk-runbook.md" in response.content
    document = Document.objects.get(collection=collection, path="chat-files/disk-runbook.md")
    assert document.state == Document.State.READY and document.passage_count > 0
    assert document.source == Document.Source.ATTACHMENT and document.attachment_id == attachment.pk
    added = KnowledgeEvent.objects.get(kind=KnowledgeEvent.Kind.DOCUMENT_ADDED, document=document)
    assert added.chat == team_chat and added.by == owner
    hits = search_for_person(member, "disk is full", collection=collection)
    assert document in {hit.document for hit in hits}


def test_others_cannot_add_a_chat_file(client, owner, member, outsider, team_chat, make_person):
    collection = runbooks(readers=[member], by=owner, name="Ops docs")
    attachment = posted_file(team_chat, member)
    url = reverse("knowledge_add_file")
    data = {"attachment": attachment.pk, "collection": collection.pk}
    client.force_login(member)  # another group member, a reader only
    assert client.post(url, data).status_code == 403
    client.force_login(outsider)  # not in the chat: the file does not exist for them
    assert client.post(url, data).status_code == 404
    # A maintainer of a collection who does not read the chat cannot take its files.
    keeper = make_person("keeper")
    theirs = runbooks(readers=[], by=keeper, name="Keeper's")
    client.force_login(keeper)
    response = client.post(url, {"attachment": attachment.pk, "collection": theirs.pk})
    assert response.status_code == 404
    assert not Document.objects.filter(source=Document.Source.ATTACHMENT).exists()


def _context(chat, person, text="add this to the Ops docs collection", **extra):
    context = web_turn(chat, person, text)
    return TurnContext(
        chat=context.chat,
        trigger=context.trigger,
        actor=context.actor,
        person=context.person,
        **extra,
    )


def test_the_tool_adds_a_file_only_for_a_maintainer_of_the_collection(
    owner, member, team_chat, inline
):
    collection = runbooks(readers=[member], by=owner, name="Ops docs")
    posted_file(team_chat, member)
    # The member asking: no tool offered, and called anyway it refuses.
    asked_by_member = _context(team_chat, member)
    assert add_tools.tools_for_turn(asked_by_member) == []
    with pytest.raises(ToolError, match="does not maintain"):
        KNOWLEDGE_ADD.handler(asked_by_member, {"collection": "Ops docs"})
    # A made-up collection gets the same answer as one they do not maintain.
    with pytest.raises(ToolError, match="does not maintain a collection called Nope"):
        KNOWLEDGE_ADD.handler(_context(team_chat, owner), {"collection": "Nope"})
    assert not Document.objects.filter(source=Document.Source.ATTACHMENT).exists()
    asked_by_owner = _context(team_chat, owner)
    assert add_tools.tools_for_turn(asked_by_owner) == [KNOWLEDGE_ADD]
    with inline(execute=True):
        answer = KNOWLEDGE_ADD.handler(asked_by_owner, {"collection": "ops DOCS"})
    assert "Added disk-runbook.md to Ops docs" in answer
    document = Document.objects.get(collection=collection, source=Document.Source.ATTACHMENT)
    assert document.path == "chat-files/disk-runbook.md" and document.state == Document.State.READY


def test_the_tool_refuses_an_integration_user_and_a_background_review(owner, team_chat):
    runbooks(readers=[], by=owner, name="Ops docs")
    posted_file(team_chat, owner)
    # An API integration's end user: an actor linked to nobody.
    api_chat, _ = chat_get_or_create(channel="api", chat_id="integration-1", kind="api")
    message = message_ingest(
        channel="api", chat_id="integration-1", user_id="end-user-7", user_name="Eve", text="add"
    ).message
    context = TurnContext(chat=api_chat, trigger=message, actor=message.actor, person=None)
    assert add_tools.tools_for_turn(context) == []
    with pytest.raises(ToolError):
        KNOWLEDGE_ADD.handler(context, {"collection": "Ops docs"})
    review = _context(team_chat, owner, origin="review")
    assert add_tools.tools_for_turn(review) == []
    with pytest.raises(ToolError, match="person's own request"):
        KNOWLEDGE_ADD.handler(review, {"collection": "Ops docs"})
    assert not Document.objects.filter(source=Document.Source.ATTACHMENT).exists()


def test_a_file_still_being_read_fails_with_a_reason(owner, team_chat, inline):
    collection = runbooks(readers=[], by=owner, name="Ops docs")
    attachment = posted_file(team_chat, owner)
    Attachment.objects.filter(pk=attachment.pk).update(state=Attachment.State.PENDING)
    with inline(execute=True):
        KNOWLEDGE_ADD.handler(_context(team_chat, owner), {"collection": "Ops docs"})
    document = Document.objects.get(collection=collection, source=Document.Source.ATTACHMENT)
    assert document.state == Document.State.FAILED and "still being read" in document.reason
