"""has: and type: in the search syntax, registered by attachments: they narrow to messages
with files (of a kind, of a sniffed type), on both databases, never outside what the person
may read, and a value they cannot take is a sentence, not a 500."""

import pytest

from attachments.services import attachment_store
from chats.search import message_search
from chats.search_query import SearchQueryError, parse_search_query

PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"

pytestmark = [pytest.mark.django_db, pytest.mark.storage]


@pytest.fixture
def messages(say, png):
    photo = say("deploy screenshot")
    attachment_store(message=photo, name="screen.png", data=png)
    report = say("deploy report")
    attachment_store(message=report, name="report.pdf", data=PDF)
    both = say("deploy everything")
    attachment_store(message=both, name="shot.png", data=png)
    attachment_store(message=both, name="data.csv", data=b"a,b\n1,2\n")
    fake = say("deploy fake")
    attachment_store(message=fake, name="fake.pdf", data=b"not a pdf at all\n")  # text
    plain = say("deploy plain words")
    return {"photo": photo, "report": report, "both": both, "fake": fake, "plain": plain}


def found(owner, query):
    return {hit.message.text for hit in message_search(person=owner, query=query)}


def test_has_file_and_kinds(owner, messages):
    with_files = {"deploy screenshot", "deploy report", "deploy everything", "deploy fake"}
    assert found(owner, "deploy has:file") == with_files
    assert found(owner, "has:files") == with_files  # a filter alone is a search
    assert found(owner, "deploy has:image") == {"deploy screenshot", "deploy everything"}
    assert found(owner, "deploy has:document") == {
        "deploy report",
        "deploy everything",
        "deploy fake",
    }


def test_type_is_the_sniffed_type_never_the_name(owner, messages):
    assert found(owner, "type:pdf") == {"deploy report"}  # fake.pdf is text
    assert found(owner, "type:png") == {"deploy screenshot", "deploy everything"}
    assert found(owner, "type:image/png") == {"deploy screenshot", "deploy everything"}
    assert found(owner, "type:csv") == {"deploy everything"}  # plain text named .csv
    assert found(owner, "type:pdf type:csv") == {"deploy report", "deploy everything"}  # either
    assert found(owner, "has:image type:csv") == {"deploy everything"}  # both filters


def test_an_outsider_finds_no_file_of_a_chat_they_do_not_read(outsider, messages):
    assert found(outsider, "has:file") == set()
    assert found(outsider, "type:pdf") == set()


@pytest.mark.parametrize(
    "query, says",
    [
        ("has:cake", "has:cake is not something a message has"),
        ("type:spreadsheet-ish", "type:spreadsheet-ish is not a file type I know"),
        ("has:", "has: needs a value, as in has:file"),
    ],
)
def test_values_it_cannot_take_are_explained(query, says):
    with pytest.raises(SearchQueryError, match=says):
        parse_search_query(query)


def test_unknown_filters_list_the_registered_ones():
    with pytest.raises(SearchQueryError) as error:
        parse_search_query("size:big")
    assert "has:" in str(error.value) and "type:" in str(error.value)
