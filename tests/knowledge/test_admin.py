"""The knowledge admin: staff see collections, documents (path, state, reason), syncs and
the audit trail, but a document's text only for a collection they may read (superusers read
every one); search matches paths, never the text; passages and citations have no admin."""

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.urls import reverse

from knowledge.models import Citation, Passage
from tests.knowledge.helpers import runbooks

pytestmark = pytest.mark.django_db

WORDS = "find the largest folders"


def staff(make_person, username):
    person = make_person(username, is_staff=True)
    wanted = ["view_collection", "view_document", "view_syncrun", "view_knowledgeevent"]
    person.user_permissions.set(
        Permission.objects.filter(content_type__app_label="knowledge", codename__in=wanted)
    )
    return person


def test_staff_who_may_not_read_a_collection_see_no_text_of_it(client, make_person, owner):
    collection = runbooks(readers=[owner], by=owner)
    document = collection.documents.get()
    operator = staff(make_person, "ops")
    client.force_login(operator)
    change = reverse("admin:knowledge_document_change", args=[document.pk])
    page = client.get(change).content.decode()
    assert "oncall/runbook.md" in page and "restricted collection you may not read" in page
    assert WORDS not in page
    listing = client.get(reverse("admin:knowledge_document_changelist"), {"q": "largest"})
    assert "oncall/runbook.md" not in listing.content.decode()
    # Made a reader, they read it there too.
    collection.readers.add(operator)
    assert WORDS in client.get(change).content.decode()


def test_a_superuser_reads_every_collections_text(client, make_person, owner):
    collection = runbooks(readers=[owner], by=owner)
    root = make_person("root", is_staff=True, is_superuser=True)
    client.force_login(root)
    page = client.get(
        reverse("admin:knowledge_document_change", args=[collection.documents.get().pk])
    ).content.decode()
    assert WORDS in page


def test_passages_and_citations_have_no_admin_and_nothing_is_written_there(make_person):
    assert Passage not in admin.site._registry and Citation not in admin.site._registry
    root = make_person("root", is_staff=True, is_superuser=True)

    class Request:
        user = root

    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label == "knowledge":
            assert not model_admin.has_add_permission(Request())
            assert not model_admin.has_change_permission(Request())
            assert not model_admin.has_delete_permission(Request())
