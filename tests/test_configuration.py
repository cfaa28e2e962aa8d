"""Every environment variable the code reads is documented in .env.example."""

import re
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
READ_PATTERNS = [
    re.compile(r"env_(?:str|bool|int|float|list)\(\s*\"([A-Z][A-Z0-9_]+)\""),
    re.compile(r"environ(?:\.get)?\(\s*\"([A-Z][A-Z0-9_]+)\""),
    re.compile(r"env\.get\(\s*\"([A-Z][A-Z0-9_]+)\""),
]
NOT_CONFIGURATION = {"DJANGO_SETTINGS_MODULE", "CI", "HERMES_REQUIRE_POSTGRES"}


def variables_read_by_code() -> set[str]:
    names = set()
    for path in BASE_DIR.glob("*/**/*.py"):
        if ".venv" in path.parts or "tests" in path.parts or "node_modules" in path.parts:
            continue
        text = path.read_text()
        for pattern in READ_PATTERNS:
            names.update(pattern.findall(text))
    return names - NOT_CONFIGURATION


def test_every_variable_is_documented_in_env_example():
    documented = set(
        re.findall(r"^# ?([A-Z][A-Z0-9_]+)=", (BASE_DIR / ".env.example").read_text(), re.M)
    )
    read = variables_read_by_code()
    assert read, "the scan found no variables: the patterns are broken"
    assert read - documented == set()
