"""A tool server's images and binary resources become attachments of the tool result, and
the model sees them on the next step: image parts in a labelled user message after the
step for a vision model, the "cannot see" note otherwise (Chat Completions takes no images
in tool messages). A real MCP server over stdio (tests/toolservers/picture_server.py), the
fake model server's recorded requests, the bounds, and who may download what a tool made."""

import base64
from pathlib import Path

import pytest

from attachments.models import Attachment
from attachments.to_model import CANNOT_SEE
from chats.agent.carrying import TOOL_FILES_LABEL
from chats.models import ChatMember, Message, Turn
from chats.services import chat_get_or_create, chat_member_ensure, message_ingest
from tests.attachments.conftest import _attachment_blobs_in_a_temporary_folder  # noqa: F401
from tests.fakes import openai_server as fake_openai
from tests.toolservers.conftest import PYTHON, add_server, enable
from tests.toolservers.picture_server import png
from tests.toolservers.test_engine import run

pytestmark = pytest.mark.django_db(transaction=True)

PICTURES = [PYTHON, str(Path(__file__).with_name("picture_server.py"))]


@pytest.fixture
def fake(settings):
    with fake_openai.FakeOpenAI() as server:
        server.configure(settings, LLM_MAX_RETRIES=0, LLM_VISION="on", VISION_LLM_MODEL="")
        yield server


@pytest.fixture
def room(team_chat):
    enable(team_chat, add_server("pictures", stdio=PICTURES))
    return team_chat


def ask(chat, person, text):
    from chats.agent.turns import message_received

    result = message_ingest(
        channel=chat.channel,
        chat_id=chat.external_id,
        user_id=f"person-{person.pk}",
        user_name=person.username,
        text=text,
        member=person,
    )
    return message_received(result, enqueue=False)


def _after_tool(request: dict) -> tuple[list[dict], dict | None]:
    """The request's tool messages and the message right after the last of them."""
    messages = request["messages"]
    tools = [i for i, m in enumerate(messages) if m["role"] == "tool"]
    after = messages[tools[-1] + 1] if tools and tools[-1] + 1 < len(messages) else None
    return [messages[i] for i in tools], after


def _texts(message: dict) -> str:
    return "\n".join(p.get("text", "") for p in message["content"] if p.get("type") == "text")


def _images(message: dict) -> list[bytes]:
    urls = [p["image_url"]["url"] for p in message["content"] if p.get("type") == "image_url"]
    return [base64.b64decode(url.split(",", 1)[1]) for url in urls]


def test_a_vision_model_sees_the_tools_image_on_the_next_step(fake, room, owner):
    fake.script(
        fake_openai.tool_calls([("c1", "pictures__screenshot", {"count": 2})]),
        fake_openai.text("Two red rectangles."),
    )
    turn = run(ask(room, owner, "take screenshots"))
    assert turn.status == Turn.Status.COMPLETED and turn.reply.text == "Two red rectangles."

    second = fake.requests[1]
    tools, after = _after_tool(second)
    assert [t["tool_call_id"] for t in tools] == ["c1"]
    assert isinstance(tools[0]["content"], str)  # no image in a tool message
    assert "2 screenshot(s) taken." in tools[0]["content"]
    assert "shown to you after this step's tool results" in tools[0]["content"]
    assert after["role"] == "user" and _texts(after).startswith(TOOL_FILES_LABEL)
    assert "Images and files returned by the tool pictures__screenshot (call c1):" in _texts(after)
    # The exact bytes the server sent, as received.
    assert _images(after) == [png(4, 3, red=255), png(5, 3, red=254)]

    result = Message.objects.get(chat=room, role=Message.Role.TOOL)
    stored = list(result.attachments.order_by("id"))
    assert [(a.name, a.kind, a.media_type, a.state) for a in stored] == [
        ("image-2.png", "image", "image/png", "ready"),
        ("image-3.png", "image", "image/png", "ready"),
    ]
    assert result.text.startswith("2 screenshot(s) taken.")  # its text is as the model read it

    # A later turn sees them in its history: after the step, never inside a tool message.
    fake.script(fake_openai.text("Still two."))
    run(ask(room, owner, "and how many were there?"))
    tools, after = _after_tool(fake.requests[-1])
    assert all(isinstance(t["content"], str) for t in tools)
    assert after["role"] == "user" and _texts(after).startswith(TOOL_FILES_LABEL)
    assert len(_images(after)) == 2
    assert fake.requests[-1]["messages"][-1]["content"].endswith("and how many were there?")


def test_without_vision_the_model_is_told_it_cannot_see_the_image(fake, room, owner, settings):
    settings.LLM_VISION = "off"
    fake.script(
        fake_openai.tool_calls(
            [("c1", "pictures__screenshot", {"count": 1}), ("c2", "pictures__screenshot", {})]
        ),
        fake_openai.text("I cannot see them."),
    )
    run(ask(room, owner, "take a screenshot, twice"))
    _, after = _after_tool(fake.requests[1])
    assert not _images(after)
    assert _texts(after).count(CANNOT_SEE) == 2 and "image-2.png" in _texts(after)
    # The same screenshot twice: two attachments (one per result), one stored blob.
    shots = Attachment.objects.order_by("id")
    assert [s.message.metadata["tool_call_id"] for s in shots] == ["c1", "c2"]
    assert shots[0].blob_id == shots[1].blob_id


def test_a_binary_resource_becomes_a_file_sniffed_from_its_bytes(fake, room, owner):
    fake.script(
        fake_openai.tool_calls([("c1", "pictures__export", {"kilobytes": 2})]),
        fake_openai.text("Exported."),
    )
    run(ask(room, owner, "export the report"))
    tools, after = _after_tool(fake.requests[1])
    assert "[resource <file:///exports/summary.md>]\n# Q3\nAll good." in tools[0]["content"]
    assert "report q3.bin" in tools[0]["content"]
    exported = Attachment.objects.get(message__role=Message.Role.TOOL)
    # Claimed as a PDF; its bytes say otherwise, and the bytes win.
    assert (exported.name, exported.declared_type) == ("report q3.bin", "application/pdf")
    assert exported.media_type != "application/pdf" and exported.size == 2048
    assert "report q3.bin" in _texts(after)


def test_fifty_images_and_a_big_blob_are_capped_with_a_clear_note(fake, room, owner, settings):
    settings.TOOLSERVERS_RESULT_FILE_BYTES = 1024
    settings.LLM_CONTEXT_TOKENS = 128_000  # room for the ten images the result keeps
    fake.script(
        fake_openai.tool_calls(
            [
                ("c1", "pictures__screenshot", {"count": 50}),
                ("c2", "pictures__export", {"kilobytes": 64}),
            ]
        ),
        fake_openai.text("Done."),
    )
    turn = run(ask(room, owner, "take fifty and export"))
    assert turn.status == Turn.Status.COMPLETED
    tools, after = _after_tool(fake.requests[1])
    shots, export = tools
    assert (
        "[40 more file(s) from the tool were not kept: a result carries at most 10."
        in (shots["content"])
    )
    assert shots["content"].count("shown to you after this step") == 10
    assert "64.0 KB: not kept, over the 1.0 KB a file from a tool may have" in export["content"]
    assert len(_images(after)) == 10
    assert "40 more file(s) from the tool were not kept" in _texts(after)
    results = {m.metadata["tool_call_id"]: m for m in Message.objects.filter(role="tool")}
    assert results["c1"].attachments.count() == 10 and not results["c2"].attachments.exists()


def test_images_past_the_requests_room_are_named_not_sent(fake, room, owner, settings):
    settings.LLM_CONTEXT_TOKENS = 4600  # the window bounds what one step's files may take
    fake.script(
        fake_openai.tool_calls([("c1", "pictures__screenshot", {"count": 10})]),
        fake_openai.text("Some."),
    )
    assert run(ask(room, owner, "ten please")).status == Turn.Status.COMPLETED
    _, after = _after_tool(fake.requests[1])
    sent, named = len(_images(after)), _texts(after).count("not shown: no room left for it")
    assert sent >= 1 and named >= 1 and sent + named == 10


def test_the_attachments_limits_apply_and_the_model_is_told(fake, room, owner, settings):
    settings.ATTACHMENTS_MAX_PER_MESSAGE = 1
    fake.script(
        fake_openai.tool_calls([("c1", "pictures__screenshot", {"count": 2})]),
        fake_openai.text("One."),
    )
    run(ask(room, owner, "two please"))
    _, after = _after_tool(fake.requests[1])
    assert len(_images(after)) == 1
    assert "pictures__screenshot: image-3.png was not kept:" in _texts(after)


def test_only_the_chats_readers_download_what_a_tool_made(
    fake, room, owner, member, outsider, make_person, client
):
    fake.script(
        fake_openai.tool_calls([("c1", "pictures__screenshot", {"count": 1})]),
        fake_openai.text("Here."),
    )
    run(ask(room, owner, "a screenshot"))
    shot = Attachment.objects.get()
    path = f"/attachments/{shot.pk}/download"
    client.force_login(member)
    response = client.get(path)
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == png(4, 3)
    elsewhere = make_person("elsewhere")  # a member of another chat
    other, _ = chat_get_or_create(channel="web", chat_id="other-room", title="Other room")
    chat_member_ensure(chat=other, person=elsewhere, role=ChatMember.Role.OWNER)
    for person in (outsider, elsewhere):
        client.force_login(person)
        assert client.get(path).status_code == 404


def test_a_step_that_waited_for_a_decision_passes_all_its_files_after_it(fake, room, owner):
    """The screenshot runs, the export waits for a decider; once decided the turn goes on in
    a fresh runner: the files of both results come in one labelled message after both."""
    from toolservers.approvals import approval_decide
    from toolservers.models import ToolApproval, ToolServer

    enable(room, ToolServer.objects.get(slug="pictures"), tool="export", policy="ask")
    fake.script(
        fake_openai.tool_calls(
            [("c1", "pictures__screenshot", {"count": 1}), ("c2", "pictures__export", {})]
        ),
        fake_openai.text("Both."),
    )
    turn = run(ask(room, owner, "shoot and export"))
    assert turn.status == Turn.Status.WAITING
    card = ToolApproval.objects.get(turn=turn)
    approval_decide(
        approval_id=card.pk, nonce=card.nonce, person=owner, approve=True, enqueue=False
    )
    turn = run(turn)
    assert turn.status == Turn.Status.COMPLETED
    messages = fake.requests[-1]["messages"]
    roles = [m["role"] for m in messages[-4:]]
    assert roles == ["assistant", "tool", "tool", "user"]
    after = messages[-1]
    assert _texts(after).startswith(TOOL_FILES_LABEL)
    assert "(call c1):" in _texts(after) and "(call c2):" in _texts(after)
    assert _images(after) == [png(4, 3)] and "report q3.bin" in _texts(after)
