"""Team knowledge through the running processes: the operator syncs a folder with
`manage.py knowledge sync` and turns it on in a room with `manage.py knowledge enable`
(subprocesses on the test database); a reader signs in to daphne and asks in the room over
HTTP; the Celery worker runs the turn against the fake model, which searches and cites; the
reply cites the right section, and its link opens the document viewer at that passage. An
outsider signed in gets 404 for the same link."""

import http.cookiejar
import json
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from chats.models import ChatMember, Message
from chats.services import chat_get_or_create, chat_member_ensure
from knowledge.models import ChatCollection, Citation, Passage
from tests.fakes import openai_server as fake_openai

pytestmark = pytest.mark.timeout(300)

BASE_DIR = Path(__file__).resolve().parent.parent.parent
SECTION = "Runbook › Full disk"
RUNBOOK = """# Runbook

## Full disk
When a disk is full, remove rotated logs under /var/log, then expand the volume.

## Certificates
Renew TLS certificates with certbot renew.
"""


class Browserless:
    """A signed-in session against the live web server, with its CSRF token."""

    def __init__(self, stack, person):
        self.stack = stack
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        self.get("/accounts/login/")
        self.post(
            "/accounts/login/",
            {"username": person.get_username(), "password": f"pw-{person.get_username()}-123!"},
        )

    def _csrf(self) -> str:
        return next(c.value for c in self.jar if c.name == "csrftoken")

    def get(self, path):
        try:
            with self.opener.open(f"{self.stack.url}{path}", timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, ""

    def post(self, path, fields):
        data = urllib.parse.urlencode({**fields, "csrfmiddlewaretoken": self._csrf()}).encode()
        request = urllib.request.Request(
            f"{self.stack.url}{path}", data=data, headers={"Referer": self.stack.url + path}
        )
        with self.opener.open(request, timeout=30) as response:
            return response.status, response.read().decode()


def manage(stack, *args):
    done = subprocess.run(
        [sys.executable, "manage.py", "knowledge", *args],
        cwd=BASE_DIR,
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_synced_folder_answers_in_a_room_with_a_citation_that_opens(
    live_stack, fake_llm, make_person, tmp_path
):
    olivia, marco, oscar = make_person("olivia"), make_person("marco"), make_person("oscar")
    room, _ = chat_get_or_create(channel="web", chat_id="ops-room", title="Ops room")
    chat_member_ensure(chat=room, person=olivia, role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=room, person=marco)
    folder = tmp_path / "runbooks"
    folder.mkdir()
    (folder / "disk.md").write_text(RUNBOOK)
    (folder / "junk.bin").write_bytes(bytes(range(256)) * 8)

    manage(live_stack, "sync", "Runbooks", str(folder), "--reader", "olivia", "--reader", "marco")
    manage(live_stack, "enable", "Runbooks", "--chat", room.chat_key)
    assert ChatCollection.objects.filter(chat=room, collection__name="Runbooks").exists()
    passage = Passage.objects.get(document__path="disk.md", section=SECTION)

    def cite(body):
        content = next(m["content"] for m in body["messages"] if m.get("tool_call_id") == "k1")
        first = json.loads(content)["passages"][0]
        return fake_openai.text(f"Remove rotated logs under /var/log [{first['ref']}].")

    fake_llm.script(
        fake_openai.tool_calls([("k1", "knowledge_search", {"query": "the disk is full"})]),
        cite,
    )
    asker = Browserless(live_stack, marco)
    status, _ = asker.post(
        f"/chats/{room.chat_key}/messages", {"text": "what do we do when the disk is full?"}
    )
    assert status == 200
    deadline = time.monotonic() + 120
    answers = Message.objects.filter(
        chat=room, role=Message.Role.ASSISTANT, text__startswith="Remove rotated logs"
    )
    while not answers.exists():
        assert time.monotonic() < deadline, "no reply"
        time.sleep(0.2)
    reply = answers.get()
    assert f"[K{passage.pk}]" in reply.text
    assert Citation.objects.get(message=reply).section == SECTION

    status, page = asker.get(f"/chats/{room.chat_key}/")
    link = re.search(r'<a class="citation" href="([^"]+)">\[disk\.md § ([^\]]+)\]</a>', page)
    assert link and link.group(2) == SECTION
    assert link.group(1).endswith(f"#K{passage.pk}")
    status, viewer = asker.get(link.group(1).split("#")[0])
    assert status == 200 and f'id="K{passage.pk}"' in viewer and "rotated logs" in viewer

    assert Browserless(live_stack, oscar).get(link.group(1).split("#")[0])[0] == 404
