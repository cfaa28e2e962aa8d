"""A CSV cell that a spreadsheet would run as a formula is written as text."""

import csv
import io

import pytest

from hermes_site.spreadsheets import csv_writer, spreadsheet_text


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        ("=1+1", "'=1+1"),
        ("+1", "'+1"),
        ("-1", "'-1"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\t=1", "'\t=1"),
        ("\r=1", "'\r=1"),
        ("Team room", "Team room"),
        ("a=b", "a=b"),
        ("", ""),
        (None, ""),
        (12, "12"),
    ],
)
def test_a_formula_is_written_as_text(value, cell):
    assert spreadsheet_text(value) == cell


def test_the_writer_makes_every_cell_text():
    out = io.StringIO()
    writer = csv_writer(out)
    writer.writerow(["=cmd|' /C calc'!A0", "3", "1.50 USD"])
    writer.writerows([["@x", "-2"]])
    rows = list(csv.reader(io.StringIO(out.getvalue())))
    assert rows == [["'=cmd|' /C calc'!A0", "3", "1.50 USD"], ["'@x", "'-2"]]
