"""One CSV writer for every table tokenroof writes: `# provenance` lines, a header, then the rows.

The layout is the one `measurements.read_table` reads back (DESIGN.md): comment lines first, then a
header row, then one row per point, `\\n` line ends. Cells go through Python's `csv` module, so a
text cell holding a comma or a quote stays one cell. Numbers are written as they will be read:
integers whole (a KV-token count of 1,234,567 is not 1.23457e+06), other numbers with `.6g` unless
a column asks for another format (a timestamp in seconds over an hour-long run needs `.6f`), and
None as an empty cell. Given a path, the file is replaced in one step, so a reader — or a sweep
interrupted while rewriting its partial results — never sees half a file.
"""

from __future__ import annotations

import csv
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

NUMBER_FORMAT = ".6g"


def format_cell(value: Any, spec: str = NUMBER_FORMAT) -> str:
    """One cell's text: integers whole, other numbers with `spec`, None empty, anything else as str()."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""  # an empty cell: not measured
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        return format(float(value), spec)
    return str(value)


def write_rows(
    target: Path | str | TextIO,
    header_lines: Iterable[str],
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    formats: Mapping[str, str] | None = None,
) -> None:
    """Write `# line` for each of `header_lines` (a line with breaks becomes several), the `columns` header, then
    `rows`, each as long as `columns`; `formats` gives a column a number format other than `.6g`. A path is written
    through a temporary file beside it and moved into place; a stream is written where it stands."""
    if isinstance(target, str | Path):
        _write_atomically(Path(target), header_lines, columns, rows, formats or {})
    else:
        _write(target, header_lines, columns, rows, formats or {})


def _write(
    out: TextIO,
    header_lines: Iterable[str],
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    formats: Mapping[str, str],
) -> None:
    unknown = sorted(set(formats) - set(columns))
    if unknown:
        raise ValueError(f"formats for column(s) not written: {', '.join(unknown)}")
    for line in header_lines:
        for part in line.splitlines() or [""]:
            out.write(f"# {part}\n")
    specs = [formats.get(column, NUMBER_FORMAT) for column in columns]
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for i, row in enumerate(rows):
        if len(row) != len(columns):
            raise ValueError(f"row {i} has {len(row)} cells for {len(columns)} columns ({', '.join(columns)})")
        writer.writerow([format_cell(value, spec) for value, spec in zip(row, specs, strict=True)])


def _write_atomically(
    path: Path,
    header_lines: Iterable[str],
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    formats: Mapping[str, str],
) -> None:
    temporary = path.with_name(path.name + ".tmp")  # beside it, so the move is a rename on one file system
    try:
        with temporary.open("w", encoding="utf-8", newline="") as out:
            _write(out, header_lines, columns, rows, formats)
        temporary.replace(path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
