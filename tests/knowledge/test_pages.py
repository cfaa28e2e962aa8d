"""The Knowledge pages: who sees which collection, document and passage; search within a
collection with the hub's syntax; uploads of files and folders by maintainers only (indexed
off the request, each file with a state and a reason); readers; a collection on or off in a
chat from the chat's page. An outsider, another group member and a reader who maintains
nothing are refused at every door."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from knowledge import tasks, uploads
from knowledge.models import ChatCollection, Document, Passage, SyncRun
from tests.knowledge.helpers import runbooks

pytestmark = pytest.mark.django_db


@pytest.fixture
def run_tasks_inline(monkeypatch, django_capture_on_commit_callbacks):
    """The upload's task runs in the test, once the request's transaction commits."""
    monkeypatch.setattr(uploads, "_enqueue", lambda run_id: uploads.index_upload(run_id))
    monkeypatch.setattr(tasks.embed_missing, "delay", lambda: tasks.embed_missing())
    return django_capture_on_commit_callbacks


def _full_disk(collection) -> Passage:
    return Passage.objects.get(collection=collection, section="On-call runbook › Disk › Full disk")


def test_the_knowledge_page_lists_only_what_the_person_may_read(
    client, owner, outsider, make_person
):
    mine = runbooks(readers=[owner], by=make_person("maint"))
    runbooks(name="Open handbook", everyone=True)
    client.force_login(owner)
    page = client.get(reverse("knowledge")).content.decode()
    assert "Runbooks" in page and "Open handbook" in page
    assert f"collection-{mine.pk}" in page
    client.force_login(outsider)
    page = client.get(reverse("knowledge")).content.decode()
    assert "Runbooks" not in page and "Open handbook" in page


def test_anonymous_people_are_sent_to_sign_in(client):
    collection = runbooks(everyone=True)
    for url in (
        reverse("knowledge"),
        reverse("knowledge_collection", args=[collection.pk]),
        reverse("knowledge_document", args=[collection.pk, collection.documents.get().pk]),
    ):
        response = client.get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_an_outsider_gets_404_for_a_restricted_collection_and_its_documents(
    client, owner, outsider
):
    collection = runbooks(readers=[owner])
    document = collection.documents.get()
    client.force_login(outsider)
    assert client.get(reverse("knowledge_collection", args=[collection.pk])).status_code == 404
    url = reverse("knowledge_document", args=[collection.pk, document.pk])
    assert client.get(url).status_code == 404
    # The same answer as for a collection that does not exist.
    assert client.get(reverse("knowledge_collection", args=[collection.pk + 99])).status_code == 404
    search = reverse("knowledge_collection", args=[collection.pk]) + "?q=disk"
    assert client.get(search).status_code == 404


def test_a_document_of_another_collection_is_not_reached_through_a_readable_one(
    client, owner, make_person
):
    readable = runbooks(readers=[owner], name="Open to olivia")
    secret = runbooks(readers=[], name="Secret", by=make_person("keeper"))
    client.force_login(owner)
    url = reverse("knowledge_document", args=[readable.pk, secret.documents.get().pk])
    assert client.get(url).status_code == 404


def test_the_viewer_shows_the_passages_with_their_anchors(client, owner):
    collection = runbooks(readers=[owner])
    passage = _full_disk(collection)
    client.force_login(owner)
    page = client.get(
        reverse("knowledge_document", args=[collection.pk, passage.document_id])
    ).content.decode()
    assert f'id="K{passage.pk}"' in page
    assert "find the largest folders" in page
    assert "运维手册" in page


def test_a_reader_sees_documents_and_states_but_not_the_readers(client, owner, member):
    collection = runbooks(readers=[owner, member], by=owner)
    Document.objects.create(
        collection=collection, path="broken.pdf", source=Document.Source.UPLOAD,
        state=Document.State.FAILED, reason="The file has no text.",
    )  # fmt: skip
    client.force_login(member)
    page = client.get(reverse("knowledge_collection", args=[collection.pk])).content.decode()
    assert "oncall/runbook.md" in page and "broken.pdf" in page and "The file has no text." in page
    assert 'id="readers"' not in page and 'id="upload-form"' not in page
    client.force_login(owner)
    page = client.get(reverse("knowledge_collection", args=[collection.pk])).content.decode()
    assert 'id="readers"' in page and "marco" in page and 'id="upload-form"' in page
    assert "webkitdirectory" in page


def test_search_within_a_collection_uses_the_hub_syntax(client, owner):
    collection = runbooks(readers=[owner])
    passage = _full_disk(collection)
    url = reverse("knowledge_collection", args=[collection.pk])
    client.force_login(owner)
    page = client.get(url, {"q": "full disk"}).content.decode()
    anchor = (
        f"{reverse('knowledge_document', args=[collection.pk, passage.document_id])}#K{passage.pk}"
    )
    assert anchor in page
    # -word drops the passages that contain it.
    page = client.get(url, {"q": "full disk -largest"}).content.decode()
    assert anchor not in page
    # A phrase must appear as written.
    page = client.get(url, {"q": '"rotated logs"'}).content.decode()
    assert anchor in page
    page = client.get(url, {"q": '"logs rotated"'}).content.decode()
    assert anchor not in page
    # The chat filters mean nothing for documents: said so.
    page = client.get(url, {"q": "disk from:olivia"}).content.decode()
    assert "narrow chat messages" in page and anchor not in page
    page = client.get(url, {"q": "disk OR"}).content.decode()
    assert "OR needs a word" in page


def _files(*pairs):
    return [SimpleUploadedFile(name.rsplit("/", 1)[-1], data) for name, data in pairs]


def test_a_maintainer_uploads_a_folder_and_each_file_gets_a_state(client, owner, run_tasks_inline):
    collection = runbooks(readers=[], by=owner)
    pairs = [
        ("handbook/intro.md", b"# Handbook\n\n## Leave\nAsk your lead two weeks ahead.\n"),
        ("handbook/ops/backup.md", b"# Backups\n\nNightly at 02:00, kept 30 days.\n"),
        ("handbook/junk.bin", bytes(range(256)) * 8),
        ("../escape.md", b"# Out\n"),
    ]
    client.force_login(owner)
    with run_tasks_inline(execute=True):
        response = client.post(
            reverse("knowledge_upload", args=[collection.pk]),
            {"files": _files(*pairs), "paths": [name for name, _ in pairs]},
        )
    assert response.status_code == 302
    run = SyncRun.objects.get(trigger=SyncRun.Trigger.UPLOAD)
    assert run.state == SyncRun.State.COMPLETED and run.by == owner
    assert run.counts["added"] == 2 and run.counts["failed"] == 1
    # Two passes, as a folder sync: stored, then embedded by the task it sends.
    uploaded = Passage.objects.filter(collection=collection, document__path__startswith="handbook/")
    assert uploaded.exists() and not uploaded.filter(embedding_model="").exists()
    documents = {d.path: d for d in collection.documents.all()}
    assert documents["handbook/ops/backup.md"].state == Document.State.READY
    assert documents["handbook/junk.bin"].state == Document.State.FAILED
    assert documents["handbook/junk.bin"].reason
    assert "../escape.md" not in documents and "escape.md" not in documents
    assert not (uploads.staging_root() / str(run.pk)).exists()
    page = client.get(response["Location"]).content.decode()
    assert "Left out" in page and "handbook/intro.md" in page
    assert f'id="sync-{run.pk}" data-state="completed"' in page


def test_an_upload_past_the_bounds_stores_nothing(client, owner, settings):
    settings.KNOWLEDGE_UPLOAD_MAX_FILES = 2
    collection = runbooks(readers=[], by=owner)
    client.force_login(owner)
    before = collection.documents.count()
    response = client.post(
        reverse("knowledge_upload", args=[collection.pk]),
        {"files": _files(("a.md", b"a"), ("b.md", b"b"), ("c.md", b"c"))},
        follow=True,
    )
    assert "at most 2" in response.content.decode()
    assert not SyncRun.objects.exists() and collection.documents.count() == before


def test_only_maintainers_upload_and_change_readers(client, owner, member, outsider):
    collection = runbooks(readers=[member], by=owner)
    upload_url = reverse("knowledge_upload", args=[collection.pk])
    readers_url = reverse("knowledge_readers", args=[collection.pk])
    client.force_login(member)  # a reader, no maintainer
    assert client.post(upload_url, {"files": _files(("a.md", b"# A"))}).status_code == 403
    assert client.post(readers_url, {"username": "oscar"}).status_code == 403
    client.force_login(outsider)
    assert client.post(upload_url, {"files": _files(("a.md", b"# A"))}).status_code == 404
    assert client.post(readers_url, {"username": "oscar"}).status_code == 404
    assert not SyncRun.objects.exists()
    client.force_login(owner)
    client.post(readers_url, {"username": "oscar"})
    assert collection.readers.filter(pk=outsider.pk).exists()
    client.post(readers_url, {"username": "oscar", "action": "remove"})
    assert not collection.readers.filter(pk=outsider.pk).exists()


def test_a_decider_who_reads_it_turns_a_collection_on_from_the_chat(
    client, owner, member, outsider, team_chat
):
    collection = runbooks(readers=[owner, member], by=owner)
    page_url = reverse("chat_knowledge", args=[team_chat.chat_key])
    set_url = reverse("chat_knowledge_set", args=[team_chat.chat_key])
    client.force_login(outsider)
    assert client.get(page_url).status_code == 404
    assert client.post(set_url, {"collection": collection.pk, "on": "1"}).status_code == 404
    client.force_login(member)  # a reader, but no decider of the chat
    assert client.post(set_url, {"collection": collection.pk, "on": "1"}).status_code == 403
    assert not ChatCollection.objects.exists()
    client.force_login(owner)
    page = client.get(page_url).content.decode()
    assert f"chat-collection-{collection.pk}" in page and "Turn on" in page
    client.post(set_url, {"collection": collection.pk, "on": "1"})
    assert ChatCollection.objects.filter(chat=team_chat, collection=collection).exists()
    client.post(set_url, {"collection": collection.pk, "on": "0"})
    assert not ChatCollection.objects.exists()


def test_a_collection_the_decider_may_not_read_is_not_theirs_to_name(
    client, owner, team_chat, make_person
):
    secret = runbooks(readers=[], name="Secret", by=make_person("keeper"))
    client.force_login(owner)
    set_url = reverse("chat_knowledge_set", args=[team_chat.chat_key])
    response = client.post(set_url, {"collection": secret.pk, "on": "1"})
    assert response.status_code == 404 and b"Secret" not in response.content
    assert (
        "Secret"
        not in client.get(reverse("chat_knowledge", args=[team_chat.chat_key])).content.decode()
    )


def test_a_chat_with_a_member_who_is_no_reader_cannot_have_it_on(client, owner, team_chat):
    collection = runbooks(readers=[owner], by=owner)  # marco, a member, is no reader
    client.force_login(owner)
    set_url = reverse("chat_knowledge_set", args=[team_chat.chat_key])
    response = client.post(set_url, {"collection": collection.pk, "on": "1"})
    assert response.status_code == 403 and b"not every member" in response.content
    assert not ChatCollection.objects.exists()


def test_an_integration_token_opens_no_knowledge_page(api_for, owner, outsider):
    """An API token (an integration's door) is no dashboard session: every page and form
    sends it to sign in, even its owner's own collection."""
    collection = runbooks(readers=[owner], by=owner)
    api = api_for(owner)
    document = collection.documents.get()
    for path in (
        reverse("knowledge"),
        reverse("knowledge_collection", args=[collection.pk]),
        reverse("knowledge_document", args=[collection.pk, document.pk]),
    ):
        response = api.get(path)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    response = api.post(
        reverse("knowledge_readers", args=[collection.pk]), body=b"username=oscar",
        content_type="application/x-www-form-urlencoded",
    )  # fmt: skip
    assert response.status_code in (302, 403)
    assert list(collection.readers.all()) == [owner]
