"""`/v1` holds the turn for files still being read: a PDF sent there is read (by a real
worker on the files' queue) before the model is asked, so the request the fake model
receives carries its text; and when the bounded wait (ATTACHMENTS_TURN_WAIT_SECONDS) passes
first, the model is told the file is still being read. The terminal's `/attach` reads the
file in its own process before its turn, with or without a worker. Through the running
processes: daphne, a Celery worker, `manage.py chat`."""

import base64
import json
import os

import httpx
import openai
import pytest

from attachments.models import Attachment
from chats.models import ApiToken, Message, Turn, TurnHold
from chats.services import api_token_create
from tests.attachments.documents import pdf_bytes
from tests.attachments.test_terminal import run_terminal
from tests.fakes import openai_server as fake_openai
from tests.live import LiveStack

pytestmark = pytest.mark.timeout(300)

PDF_TEXT = "Runbook step seven: restart the ingest daemon"
PENDING = "still being read; its text is not available yet"


def runbook_pdf(words: str = PDF_TEXT) -> bytes:
    return pdf_bytes([[words, "then check the queue depth"], ["page two of the runbook"]])


def data_url(data: bytes, media_type: str) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def _stack(fake_llm, tmp_path, *, files_worker: bool, **env):
    stack = LiveStack(
        llm_base_url=fake_llm.base_url,
        worker_name=f"holds-{os.getpid()}@%h",
        extra_env={
            "ATTACHMENTS_STORAGE_OPTIONS": json.dumps({"location": str(tmp_path / "blobs")}),
            **env,
        },
    )
    stack.start_web()
    # Without the files' queue no document is ever read: the bound is what ends the wait.
    stack.start_worker(extra_queues=("files",) if files_worker else ())
    return stack


@pytest.fixture
def reading_stack(transactional_db, fake_llm, tmp_path):
    stack = _stack(fake_llm, tmp_path, files_worker=True)
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def unread_stack(transactional_db, fake_llm, tmp_path):
    stack = _stack(fake_llm, tmp_path, files_worker=False, ATTACHMENTS_TURN_WAIT_SECONDS="2")
    try:
        yield stack
    finally:
        stack.stop()


def _sdk(stack, make_person, name="alice"):
    person = make_person(name)
    _, key = api_token_create(person=person, kind=ApiToken.Kind.PERSONAL)
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key=key, max_retries=0, timeout=120), key


def _pdf_message(text: str, pdf: bytes, name: str = "runbook.pdf") -> dict:
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": text},
            {
                "type": "file",
                "file": {"filename": name, "file_data": data_url(pdf, "application/pdf")},
            },
        ],
    }


def _user_text(request: dict) -> str:
    """Everything the last user message of a model request says (its text parts)."""
    content = request["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(part.get("text", "") for part in content if isinstance(part, dict))


def test_v1_waits_for_the_pdf_to_be_read_whole_and_streamed(reading_stack, fake_llm, make_person):
    sdk, key = _sdk(reading_stack, make_person)

    fake_llm.script(fake_openai.text("Restart the ingest daemon."))
    completion = sdk.chat.completions.create(
        model="hermes-hub", messages=[_pdf_message("What does step seven say?", runbook_pdf())]
    )
    assert completion.choices[0].message.content == "Restart the ingest daemon."
    asked = _user_text(fake_llm.requests[-1])
    assert PDF_TEXT in asked and PENDING not in asked  # read before the model was asked
    question = Message.objects.get(text="What does step seven say?")
    pdf = Attachment.objects.get(message=question)
    assert (pdf.state, pdf.media_type, pdf.page_count) == ("ready", "application/pdf", 2)
    hold = TurnHold.objects.get(message=question)
    assert hold.state == TurnHold.State.RELEASED and hold.turn.trigger_id == question.pk
    assert Turn.objects.filter(trigger=question).count() == 1

    # Streamed (raw SSE, to see the hub's waiting chunk): the same wait, then the answer.
    fake_llm.script(fake_openai.text("It says to check the queue depth."))
    body = {
        "model": "hermes-hub",
        "stream": True,
        "messages": [_pdf_message("And after that?", runbook_pdf("Step eight: drain the queue"))],
    }
    with httpx.stream(
        "POST",
        f"{reading_stack.url}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=120,
    ) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line]
    assert ": waiting for files" in lines
    chunks = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
    statuses = [c.get("hermes", {}).get("status") for c in chunks if "hermes" in c]
    assert statuses == ["waiting", "resumed"]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "It says to check the queue depth."
    assert lines[-1] == "data: [DONE]"
    assert "Step eight: drain the queue" in _user_text(fake_llm.requests[-1])

    # The Responses API, streamed through the SDK: the same hold.
    fake_llm.script(fake_openai.text("Page two is about the runbook."))
    stream = sdk.responses.create(
        model="hermes-hub",
        stream=True,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Summarise it."},
                    {
                        "type": "input_file",
                        "filename": "third.pdf",
                        "file_data": data_url(
                            runbook_pdf("Step nine: page the on-call"), "application/pdf"
                        ),
                    },
                ],
            }
        ],
    )
    kinds = [event.type for event in stream]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "Step nine: page the on-call" in _user_text(fake_llm.requests[-1])


def test_v1_bounded_wait_ends_with_a_note_that_the_file_is_still_being_read(
    unread_stack, fake_llm, make_person
):
    sdk, _ = _sdk(unread_stack, make_person)
    fake_llm.script(fake_openai.text("I cannot read it yet."))
    completion = sdk.chat.completions.create(
        model="hermes-hub", messages=[_pdf_message("Read this please", runbook_pdf())]
    )
    assert completion.choices[0].message.content == "I cannot read it yet."
    asked = _user_text(fake_llm.requests[-1])
    assert "runbook.pdf" in asked and PENDING in asked and PDF_TEXT not in asked
    pdf = Attachment.objects.get(message__text="Read this please")
    assert pdf.state == Attachment.State.PENDING  # nobody read it: the bound ended the wait
    hold = TurnHold.objects.get(message=pdf.message)
    assert hold.state == TurnHold.State.RELEASED and hold.released_at >= hold.deadline
    assert hold.turn == Turn.objects.get(trigger=pdf.message)


def _terminal_pdf(tmp_path):
    pdf = tmp_path / "runbook.pdf"
    pdf.write_bytes(runbook_pdf())
    return pdf


def test_terminal_attach_reads_the_pdf_before_the_turn(reading_stack, fake_llm, tmp_path):
    # The terminal runs its turns in its own process and reads a staged file there too:
    # the model gets the PDF's text, and no hold was needed.
    pdf = _terminal_pdf(tmp_path)
    typed = f"/attach {pdf}\nwhat does step seven say?\n/quit\n"
    result = run_terminal(fake_llm, tmp_path / "blobs", typed)
    out = result.stdout
    assert "Attached runbook.pdf" in out and "Read runbook.pdf." in out
    assert "you said: what does step seven say?" in out
    asked = _user_text(fake_llm.requests[-1])
    assert PDF_TEXT in asked and PENDING not in asked
    message = Message.objects.get(text="what does step seven say?")
    assert Attachment.objects.get(message=message).state == Attachment.State.READY
    assert not TurnHold.objects.filter(message=message).exists()
    assert Turn.objects.filter(trigger=message, status="completed").count() == 1


def test_terminal_reads_the_pdf_without_any_worker(transactional_db, fake_llm, tmp_path):
    # No worker reads the files' queue here, and a 1 s bound would end any wait: the terminal
    # reads the file itself, so the model still gets its text.
    pdf = _terminal_pdf(tmp_path)
    typed = f"/attach {pdf}\nwhat does it say?\n/quit\n"
    result = run_terminal(fake_llm, tmp_path / "blobs", typed, ATTACHMENTS_TURN_WAIT_SECONDS="1")
    assert "Read runbook.pdf." in result.stdout
    assert "you said: what does it say?" in result.stdout
    asked = _user_text(fake_llm.requests[-1])
    assert "runbook.pdf" in asked and PDF_TEXT in asked and PENDING not in asked
    message = Message.objects.get(text="what does it say?")
    assert not TurnHold.objects.filter(message=message).exists()
    assert Turn.objects.filter(trigger=message, status="completed").count() == 1
