"""The registries files plug into: a part type has one handler, and a failing staged consumer
never loses the message."""

import pytest

from chats import staged
from openai_api.content_parts import (
    ContentPartHandler,
    accepted_part_types,
    register_content_part_handler,
)


def test_attachments_take_the_v1_part_types_and_no_one_else_may():
    assert {"image_url", "input_image", "file", "input_file"} <= set(accepted_part_types())
    rival = ContentPartHandler(
        name="rival", types=("image_url",), resolve=lambda part: None, store=lambda m, f: None
    )
    with pytest.raises(ValueError, match="image_url"):
        register_content_part_handler(rival)


@pytest.mark.django_db
def test_a_failing_staged_consumer_is_reported_and_the_others_still_run(say, monkeypatch):
    def broken(message, session):
        raise RuntimeError("disk on fire")

    monkeypatch.setitem(staged._consumers, "broken", broken)
    monkeypatch.setitem(staged._consumers, "fine", lambda message, session: ["fine ran"])
    lines = staged.staged_store(message=say(), session={})
    assert "Could not store what /broken staged; the message was sent without it." in lines
    assert "fine ran" in lines
