"""A file's name is kept as given, made safe, and sent back intact (RFC 5987)."""

import unicodedata
from urllib.parse import unquote

from attachments.names import clean_file_name, download_disposition


def test_names_lose_their_folders_and_control_characters():
    assert clean_file_name("../../etc/passwd") == "passwd"
    assert clean_file_name("C:\\Users\\a\\report.pdf") == "report.pdf"
    assert clean_file_name("evil\x00name\u202e.txt") == "evilname.txt"
    assert clean_file_name("..") == "file"
    assert clean_file_name("") == "file"


def test_names_are_nfc_normalised():
    decomposed = unicodedata.normalize("NFD", "café.txt")
    assert clean_file_name(decomposed) == "café.txt"
    assert clean_file_name(decomposed) != decomposed


def test_long_names_keep_their_extension():
    name = clean_file_name("x" * 400 + ".pdf")
    assert len(name) == 255 and name.endswith(".pdf")


def test_a_chinese_name_round_trips_through_the_header():
    header = download_disposition("季度报告 2026.pdf")
    assert header.startswith("attachment; ")
    encoded = header.split("filename*=UTF-8''", 1)[1]
    assert unquote(encoded) == "季度报告 2026.pdf"
    assert 'filename="____ 2026.pdf"' in header  # the ASCII fallback for old clients


def test_quotes_cannot_break_out_of_the_header():
    header = download_disposition('a"; filename="evil.html')
    assert header.count('"') == 2
