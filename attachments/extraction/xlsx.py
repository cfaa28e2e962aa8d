"""XLSX cells streamed with lxml, for the extraction child.

openpyxl (even read-only) parses every shared string before the first cell: for a 50 MB
workbook of a million rows that is most of a minute of CPU and 200 MB before one line is
stored, though the text cap stops the reading after a few thousand rows. Here the shared
strings are read lazily, only as far as the cells read so far refer (Excel writes them in
order of first use), and each sheet is streamed row by row, each row freed once read. Dates
are told by their cell style's number format, as spreadsheet programs do.
"""

import datetime
import posixpath
import re
import zipfile
from collections.abc import Iterator

NS = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
REL_NS = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
PKG_REL_NS = "{http://schemas.openxmlformats.org/package/2006/relationships}"
# Built-in number formats that are dates or times (ECMA-376, 18.8.30).
_DATE_FORMAT_IDS = frozenset({14, 15, 16, 17, 18, 19, 20, 21, 22, 45, 46, 47})
_DATE_CODE = re.compile(r"[dmyhs]", re.IGNORECASE)
_QUOTED = re.compile(r'"[^"]*"|\[[^\]]*\]|\\.')
_EPOCH = datetime.datetime(1899, 12, 30)


def _parser():
    from lxml import etree

    return etree


class SharedStrings:
    """The workbook's shared strings, parsed only as far as an index asked for needs."""

    def __init__(self, archive: zipfile.ZipFile, name: str | None):
        self._strings: list[str] = []
        self._source = self._parse(archive, name) if name else iter(())

    @staticmethod
    def _parse(archive: zipfile.ZipFile, name: str) -> Iterator[str]:
        etree = _parser()
        with archive.open(name) as part:
            for _, item in etree.iterparse(part, events=("end",), tag=f"{NS}si"):
                # Rich text keeps its runs' text; phonetic guides (rPh) are left out.
                texts = [item.findtext(f"{NS}t") or ""]
                texts += [run.findtext(f"{NS}t") or "" for run in item.iterfind(f"{NS}r")]
                yield "".join(texts)
                item.clear()
                while item.getprevious() is not None:
                    del item.getparent()[0]

    def __getitem__(self, index: int) -> str:
        while len(self._strings) <= index:
            try:
                self._strings.append(next(self._source))
            except StopIteration:
                return ""
        return self._strings[index]


def _date_styles(archive: zipfile.ZipFile, name: str | None) -> frozenset[int]:
    """The indexes of the cell formats (cellXfs) that show a date or a time."""
    if not name:
        return frozenset()
    etree = _parser()
    root = etree.fromstring(archive.read(name))
    custom = {}
    for number_format in root.iterfind(f"{NS}numFmts/{NS}numFmt"):
        code = _QUOTED.sub("", number_format.get("formatCode") or "")
        custom[int(number_format.get("numFmtId", "0"))] = bool(_DATE_CODE.search(code))
    dated = set()
    for index, xf in enumerate(root.iterfind(f"{NS}cellXfs/{NS}xf")):
        format_id = int(xf.get("numFmtId", "0"))
        if format_id in _DATE_FORMAT_IDS or custom.get(format_id):
            dated.add(index)
    return frozenset(dated)


def _targets(archive: zipfile.ZipFile) -> tuple[list[tuple[str, str]], str | None, str | None]:
    """[(sheet name, part name)], the shared strings' part and the styles' part."""
    etree = _parser()
    workbook = "xl/workbook.xml"
    rels_name = "xl/_rels/workbook.xml.rels"
    rels = {}
    shared = styles = None
    for rel in etree.fromstring(archive.read(rels_name)).iterfind(f"{PKG_REL_NS}Relationship"):
        target = rel.get("Target", "")
        part = target.lstrip("/") if target.startswith("/") else posixpath.join("xl", target)
        part = posixpath.normpath(part)
        rels[rel.get("Id")] = part
        kind = rel.get("Type", "")
        if kind.endswith("/sharedStrings"):
            shared = part
        elif kind.endswith("/styles"):
            styles = part
    # A workbook whose relationships leave the parts out (some writers do): the usual names.
    if shared is None and "xl/sharedStrings.xml" in archive.NameToInfo:
        shared = "xl/sharedStrings.xml"
    if styles is None and "xl/styles.xml" in archive.NameToInfo:
        styles = "xl/styles.xml"
    sheets = []
    for sheet in etree.fromstring(archive.read(workbook)).iterfind(f"{NS}sheets/{NS}sheet"):
        part = rels.get(sheet.get(f"{REL_NS}id"))
        if part and part in archive.NameToInfo and "worksheets/" in part:
            sheets.append((sheet.get("name", "Sheet"), part))
    return sheets, shared, styles


def _number(text: str) -> str:
    try:
        value = float(text)
    except ValueError:
        return text
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value) if len(text) > 17 else text


def _date(text: str) -> str:
    try:
        serial = float(text)
        moment = _EPOCH + datetime.timedelta(days=serial)
    except (ValueError, OverflowError):
        return text
    if serial < 1:
        return moment.time().isoformat(timespec="seconds")
    if serial.is_integer():
        return moment.date().isoformat()
    return moment.isoformat(sep=" ", timespec="seconds")


def _column(reference: str) -> int:
    number = 0
    for char in reference:
        if "A" <= char <= "Z":
            number = number * 26 + ord(char) - 64
        else:
            break
    return number


def _clean(text: str) -> str:
    if "\t" in text or "\n" in text or "\r" in text:
        return text.replace("\t", " ").replace("\r", " ").replace("\n", " ")
    return text


def _rows(archive, part, shared: SharedStrings, dated: frozenset[int]):
    """(row number, [cell text]) for each row of one sheet that has cells."""
    etree = _parser()
    cell_tag, value_tag, inline_tag = f"{NS}c", f"{NS}v", f"{NS}is"
    with archive.open(part) as stream:
        number = 0
        for _, row in etree.iterparse(stream, events=("end",), tag=f"{NS}row"):
            number = int(row.get("r") or number + 1)
            cells: list[str] = []
            for cell in row:
                if cell.tag != cell_tag:
                    continue
                kind = cell.get("t")
                value = None
                for child in cell:
                    if child.tag == value_tag:
                        value = child.text or ""
                    elif child.tag == inline_tag:
                        value = "".join(child.itertext())
                if value is None:
                    continue
                if kind is None or kind == "n":
                    style = cell.get("s")
                    text = _date(value) if style and int(style) in dated else _number(value)
                elif kind == "s":
                    text = shared[int(value)] if value.isdigit() else ""
                elif kind == "b":
                    text = "TRUE" if value == "1" else "FALSE"
                else:  # inlineStr, str (a formula's text), e (an error such as #DIV/0!)
                    text = value
                reference = cell.get("r")
                column = _column(reference) if reference else len(cells) + 1
                while len(cells) < column - 1:
                    cells.append("")
                cells.append(_clean(text))
            row.clear()
            while row.getprevious() is not None:
                del row.getparent()[0]
            while cells and not cells[-1]:
                cells.pop()
            if cells:
                yield number, cells


def workbook_rows(path: str) -> Iterator[tuple[str, Iterator[tuple[int, list[str]]]]]:
    """(sheet name, its rows) for each worksheet, in the workbook's order."""
    with zipfile.ZipFile(path) as archive:
        sheets, shared_part, styles_part = _targets(archive)
        shared = SharedStrings(archive, shared_part)
        dated = _date_styles(archive, styles_part)
        for name, part in sheets:
            yield name, _rows(archive, part, shared, dated)
