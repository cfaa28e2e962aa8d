"""`manage.py create_api_token`: the printed token is the only stdout and it works."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from chats.models import ApiToken, hash_api_token
from tests.conftest import ApiClient

pytestmark = [pytest.mark.django_db, pytest.mark.storage]


def run(*args):
    stdout, stderr = StringIO(), StringIO()
    call_command("create_api_token", *args, stdout=stdout, stderr=stderr)
    return stdout.getvalue(), stderr.getvalue()


def test_prints_only_a_working_token(owner):
    stdout, stderr = run("olivia", "--name", "ci runner")

    raw = stdout.strip()
    assert stdout == raw + "\n"  # one line, nothing else, so $(...) captures exactly it
    token = ApiToken.objects.get()
    assert token.person == owner and token.name == "ci runner"
    assert token.key_hash == hash_api_token(raw) and raw not in stderr
    assert "not be shown again" in stderr

    response = ApiClient(raw).get("/api/v1/chats")
    assert response.status_code == 200


def test_each_run_makes_a_new_token(owner):
    first, _ = run("olivia")
    second, _ = run("olivia")
    assert first != second
    assert ApiToken.objects.filter(person=owner).count() == 2


def test_unknown_person_is_an_error_and_creates_nothing(owner):
    with pytest.raises(CommandError, match="nobody"):
        run("nobody")
    assert ApiToken.objects.count() == 0


def test_inactive_person_is_an_error(owner):
    owner.is_active = False
    owner.save()
    with pytest.raises(CommandError, match="inactive"):
        run("olivia")
    assert ApiToken.objects.count() == 0
