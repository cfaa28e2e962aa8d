"""Tolerant patch matching: the fixed order of levels, re-indentation, refusals."""

import pytest

from skills.matching import PatchError, apply_patch

TEXT = (
    "# Deploy\n\n1. Build:\n    make image   \n2. Ship:\n"
    '    deploy --env "staging" --wait\n    check it\n'
)


@pytest.mark.parametrize(
    ("old", "new", "level", "expected"),
    [
        ("make image", "make all", "exact", "    make all   \n"),
        (
            "1. Build:\n    make image\n",
            "1. Build:\n    make all\n",
            "line-trimmed",
            "1. Build:\n    make all\n2.",
        ),
        (
            'deploy  --env   "staging"',
            'deploy --env "qa"',
            "whitespace-normalised",
            '    deploy --env "qa" --wait\n',
        ),
        (
            '  deploy --env "staging" --wait\n  check it',
            '  deploy --env "qa"\n  verify it',
            "indentation-flexible",
            '    deploy --env "qa"\n    verify it\n',
        ),
        (
            "2. Ship:\\n    deploy",
            "2. Ship:\\n    release",
            "escape-normalised",
            "2. Ship:\n    release --env",
        ),
        (
            "deploy --env “staging” --wait",
            "deploy --env “qa” --wait",
            "unicode-normalised",
            "    deploy --env “qa” --wait\n",
        ),
        (
            "  deploy --env \u201cstaging\u201d \u2013\u2013wait\n      check it",
            '  deploy --env "qa"\n      check all',
            "unicode-normalised",
            '    deploy --env "qa"\n        check all\n',
        ),
    ],
)
def test_levels_in_their_fixed_order(old, new, level, expected):
    result = apply_patch(TEXT, old, new)
    assert result.level == level and result.count == 1
    assert expected in result.text, result.text


def test_several_matches_need_replace_all():
    text = "- run tests\n- deploy\n- run tests\n"
    with pytest.raises(PatchError, match=r"matches 2 places .*line 1: .*line 3: .*replace_all"):
        apply_patch(text, "run tests", "run checks")
    result = apply_patch(text, "run tests", "run checks", replace_all=True)
    assert result.text == "- run checks\n- deploy\n- run checks\n" and result.count == 2


def test_a_missing_match_shows_the_nearest_candidates():
    with pytest.raises(PatchError) as refused:
        apply_patch(TEXT, "deploy --env production --wiat", "x")
    message = str(refused.value)
    assert "was not found" in message
    assert 'Nearest text: line 6: deploy --env "staging" --wait' in message


def test_an_empty_needle_is_refused():
    with pytest.raises(PatchError, match="is empty"):
        apply_patch(TEXT, " \n ", "x")


def test_the_first_level_that_finds_decides_even_if_a_later_one_would_find_more():
    text = "a 'b'\na \u2018b\u2019\n"
    result = apply_patch(text, "a 'b'", "c")
    assert result.level == "exact" and result.text == "c\na \u2018b\u2019\n"


def test_replace_all_of_many_matches_builds_the_same_text_as_one_replacement_at_a_time():
    text = "".join(f"{'  ' * (n % 3)}- run tests {n}\n" for n in range(3000))
    result = apply_patch(text, "run tests", "run checks", replace_all=True)
    assert result.count == 3000 and result.text == text.replace("run tests", "run checks")
    # Re-indented replacements follow each matched line's own indentation.
    text = "a:\n  step\nb:\n      step\n"
    result = apply_patch(text, "\tstep", "\tfirst\n\tsecond", replace_all=True)
    assert result.level == "line-trimmed" and result.count == 2
    assert result.text == "a:\n  first\n  second\nb:\n      first\n      second\n"


def test_a_result_past_max_chars_is_refused_with_its_size_before_it_is_built():
    text = "x" * 50_000  # one long line: 50,000 matches
    with pytest.raises(PatchError, match=r"up to 50,000,000 characters \(50,000 matches"):
        apply_patch(text, "x", "y" * 1000, replace_all=True, max_chars=100_000)
    result = apply_patch(text, "x", "yy", replace_all=True, max_chars=100_000)
    assert result.text == "yy" * 50_000


def test_nearest_candidates_of_a_long_text_are_sampled_not_all_scored():
    # About 1 MiB, a supporting file at its limit.
    text = "\n".join(f"line {n} of the runbook" for n in range(40_000))
    with pytest.raises(PatchError, match="Nearest text: line"):
        apply_patch(text, "nothing like it at all", "x")
