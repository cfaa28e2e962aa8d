"""Fixtures of the voice tests: the joined model in one folder per test session (never var/),
blobs in a temporary folder."""

import pytest

from tests.attachments.conftest import (  # noqa: F401 - fixtures shared with attachments
    _attachment_blobs_in_a_temporary_folder,
    say,
)


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("voice-models")


@pytest.fixture(autouse=True)
def _voice_settings(settings, model_cache):
    settings.VOICE_MODEL_CACHE = model_cache
    settings.VOICE_CPU_THREADS = 2
    settings.VOICE_LANGUAGE = ""
    settings.STT_BASE_URL = ""
