"""The CSV reader: `batch,throughput_tok_s,tpot_ms[,context_tokens][,ttft_ms][,requests][,concurrency][,sent]` with
`#` provenance and `# key=value` settings lines (DESIGN.md); a large plain table is parsed as one block by numpy.
The writer is csvio.py."""

from __future__ import annotations

import csv
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from tokenroof.errors import TokenroofError
from tokenroof.io.table import (
    COLUMNS,
    PLAUSIBLE,
    SENTINEL,
    Columns,
    MeasurementTable,
    _number,
    parse_settings,
    table_from_columns,
)


# -- readers -------------------------------------------------------------------------
def parse_csv(text: str, source: str = "<csv>") -> MeasurementTable:
    """Parse the DESIGN.md CSV; errors name the file, line and column."""
    if len(text) >= LARGE_CSV_CHARS:
        table = _parse_large(text, source)
        if table is not None:
            return table
    lines = text.splitlines()
    kinds = _line_kinds(lines)
    provenance = [lines[i].strip().lstrip("#").strip() for i in np.flatnonzero(kinds == 1)]
    body = np.flatnonzero(kinds == 0)
    if not body.size:
        raise TokenroofError(f"{source}: no header line (expected {','.join(COLUMNS[:3])})")
    header = _header(lines[body[0]], f"{source}:{body[0] + 1}")
    data = body[1:]
    contiguous = data.size and data[-1] - data[0] == data.size - 1
    rows = lines[data[0] : data[-1] + 1] if contiguous else [lines[i] for i in data]

    def where(i: int) -> str:
        return f"{source}:{data[i] + 1}"

    values = _fast_cells(rows, header) if rows else None
    if values is None:
        values = _cells(rows, header, where)
    absent = np.full(len(rows), np.nan)
    columns = {name: values[:, header.index(name)] if name in header else absent for name in COLUMNS}
    return table_from_columns(Columns(columns, where), provenance, source, parse_settings(provenance, source))


LARGE_CSV_CHARS = 1 << 20  # from here on, a plain table is parsed without a Python string per line
LINE_BREAKS = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")  # str.splitlines' other line ends


def _parse_large(text: str, source: str) -> MeasurementTable | None:
    """A large plain table (comments and the header first, then one data row per line, every cell a number or
    empty) parsed from the text as one block: a million rows in a fraction of the memory a string per line costs.
    None leaves anything else to the line-by-line parse, which names the problem."""
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
    if any(end in text for end in "\r\x0b\x0c\x1c\x1d\x1e") or (not text.isascii() and LINE_BREAKS.search(text)):
        return None  # a line end other than \\n: the line-by-line parse splits as str.splitlines does
    provenance, start, number = [], 0, 0
    while True:  # the lines before the data: comments, blanks, the header
        end = text.find("\n", start)
        if end < 0:
            return None
        line, number = text[start:end], number + 1
        start = end + 1
        head = line.strip()
        if head.startswith("#"):
            provenance.append(head.lstrip("#").strip())
        elif head:
            header = _header(line, f"{source}:{number}")
            break
    body = text[start:].rstrip("\n")
    raw = np.frombuffer(body.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    starts = np.concatenate(([0], np.flatnonzero(raw == ord("\n")) + 1))
    first = raw[starts] if raw.size else raw
    if not raw.size or not ((first > ord(" ")) & (first < 127) & (first != ord("#"))).all():
        return None  # a blank or comment line among the rows, or no rows
    rows = len(starts)
    filled, empty_cells = _fill_empty_text(body)
    try:
        parsed = np.loadtxt(_chunked_lines(filled), delimiter=",", dtype=float, comments=None, ndmin=2)
    except ValueError:
        return None
    del body, raw, starts, first, filled  # the text's copies, before the table's own arrays are made
    values = _checked_cells(parsed, empty_cells, rows, header)
    if values is None:
        return None
    header_line = number

    def where(i: int) -> str:
        return f"{source}:{header_line + 1 + i}"

    absent = np.full(rows, np.nan)
    columns = {name: values[:, header.index(name)] if name in header else absent for name in COLUMNS}
    return table_from_columns(Columns(columns, where), provenance, source, parse_settings(provenance, source))


def _chunked_lines(text: str, chunk_chars: int = 1 << 20) -> Iterator[str]:
    """The lines of `text` (\\n only), a chunk at a time: numpy reads them at its speed while only one chunk's
    strings are alive (io.StringIO holds four bytes per character, four times the text)."""
    start = 0
    while start < len(text):
        end = text.find("\n", start + chunk_chars)
        end = len(text) if end < 0 else end + 1
        yield from text[start:end].split("\n")[: None if end == len(text) else -1]
        start = end


def _line_kinds(lines: list[str]) -> np.ndarray:
    """Per line: 0 data (the header among them), 1 provenance ('#'), 2 blank. A line whose first byte is a visible
    ASCII character other than '#' is data, decided in bulk; the others (whitespace first, '#', non-ASCII) one
    by one."""
    kinds = np.zeros(len(lines), dtype=np.int8)
    if not lines:
        return kinds
    data = np.frombuffer(("\n".join(lines) + "\n").encode("utf-8", "surrogatepass"), dtype=np.uint8)
    starts = np.concatenate(([0], np.flatnonzero(data == ord("\n"))[:-1] + 1))
    first = data[starts]
    plain = (first > ord(" ")) & (first < 127) & (first != ord("#"))
    for i in np.flatnonzero(~plain):
        head = lines[i].lstrip()[:1]
        kinds[i] = 2 if not head else 1 if head == "#" else 0
    return kinds


def _header(line: str, where: str) -> list[str]:
    """The header's column names: each known, none twice, batch and a TPOT or throughput among them."""
    header = [h.strip() for h in _split(line, where)]
    repeated = sorted(name for name, n in Counter(header).items() if n > 1)
    if repeated:
        raise TokenroofError(f"{where}: column(s) {', '.join(repeated)} appear more than once")
    unknown = [h for h in header if h not in COLUMNS]
    if unknown:
        raise TokenroofError(
            f"{where}: unknown column(s) {', '.join(repr(u) for u in unknown)}; known: {', '.join(COLUMNS)}"
        )
    if "batch" not in header or not {"throughput_tok_s", "tpot_ms"} & set(header):
        raise TokenroofError(f"{where}: header needs 'batch' and at least one of 'throughput_tok_s', 'tpot_ms'")
    return header


def _split(line: str, where: str) -> list[str]:
    """One CSV line's cells (quoting as Excel writes it); a line the csv module cannot read is named."""
    try:
        return next(csv.reader([line]), [])
    except csv.Error as exc:
        raise TokenroofError(f"{where}: cannot read this line as CSV ({exc})") from None


def _cells(rows: Sequence[str], header: list[str], where: Callable[[int], str]) -> np.ndarray:
    """Every cell as a number (NaN: empty), row by row, raising at the first bad cell as its row and column."""
    values = np.full((len(rows), len(header)), np.nan)
    checked = [(col, header.index(col)) for col in COLUMNS if col in header]
    for i, line in enumerate(rows):
        cells = _split(line, where(i))
        if len(cells) != len(header):
            raise TokenroofError(f"{where(i)}: {len(cells)} values for {len(header)} columns")
        for col, j in checked:
            value = _number(cells[j], where(i), col)
            if value is not None:
                values[i, j] = value
        if math.isnan(values[i, header.index("batch")]):
            raise TokenroofError(f"{where(i)}: batch is empty")
    return values


def _loadtxt(rows: list[str]) -> np.ndarray:
    return np.loadtxt(rows, delimiter=",", dtype=float, comments=None, ndmin=2)


def _fast_cells(rows: list[str], header: list[str]) -> np.ndarray | None:
    """`_cells` at C speed when every cell is a valid number or empty; None leaves the rest (quoting, a bad cell,
    a short row, a blank cell) to `_cells`, which names the problem. Empty cells are parsed as SENTINEL, a value
    no valid cell has, counted, and turned into NaN."""
    text, empty_cells = _fill_empty(rows)
    try:
        values = _loadtxt(text.split("\n") if empty_cells else rows)
    except ValueError:
        return None
    return _checked_cells(values, empty_cells, len(rows), header)


def _checked_cells(values: np.ndarray, empty_cells: int, rows: int, header: list[str]) -> np.ndarray | None:
    """numpy's cells if each is plausible or was empty (SENTINEL, as many as were filled), empties as NaN, the batch
    never empty; None when not (the line-by-line parse then names the problem)."""
    if values.shape != (rows, len(header)):
        return None
    empty = values == SENTINEL
    plausible = (values >= PLAUSIBLE[0]) & (values <= PLAUSIBLE[1])  # False for NaN
    if np.count_nonzero(empty) != empty_cells or not (empty | plausible).all():
        return None
    values[empty] = np.nan
    return None if np.isnan(values[:, header.index("batch")]).any() else values


def _fill_empty(rows: list[str]) -> tuple[str, int]:
    """The rows as one text with SENTINEL in every empty cell (between two commas, or a comma and a line's end),
    and how many ("", 0 when none)."""
    text, filled = _fill_empty_text("\n".join(rows))
    return (text, filled) if filled else ("", 0)


def _fill_empty_text(rows: str) -> tuple[str, int]:
    """`rows` (lines joined by \\n) with SENTINEL in every empty cell, and how many."""
    text, filled = "\n" + rows + "\n", 0
    for empty in (",,", ",,", "\n,", ",\n"):  # twice: ",,," holds two, and replace does not overlap
        found = text.count(empty)
        if found:
            filled += found
            text = text.replace(empty, empty[0] + repr(SENTINEL) + empty[1])
    return text[1:-1], filled
