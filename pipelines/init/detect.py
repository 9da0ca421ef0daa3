"""What `shardflow init` tells from a file before reading its records: the source format from the
file name, and for delimited text the options of the csv format (delimiter, header, encoding,
null markers).

Only options the csv reader has are detected (`transforms.sources.csv.options`): its quote
character is always `"`, so quoting is not sniffed. The delimiter is the candidate that splits
the first rows of the file into the same number of fields (more than one), read with Python's
csv module as the reader reads them, so a delimiter inside quotes does not count. A first row
is a header when its cells are names: text above columns of numbers, or distinct name-like text
that the rest of the column never repeats.
"""

from __future__ import annotations

import codecs
import collections
import csv
import io
import re
from typing import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.config.fields import MAX_NAME_BYTES, ConfigError
from transforms.schema import SPACE
from transforms.sources import registry
from transforms.ui.suggest import did_you_mean

# The formats `init` samples records of; a file's format is the first of these that the source
# registry reads a file of its name with (`.txt` is delimited text when a delimiter is found, else
# one record per line).
INIT_FORMATS = ("csv", "jsonl", "parquet", "avro", "tfrecord")

DELIMITERS = (",", "\t", ";", "|")
# Cells that stand for a missing value in exported tables (R, pandas, SQL dumps, spreadsheets).
# One becomes a null marker of the source when a column of numbers holds it (a number column
# cannot otherwise read it); a marker applies to every column of the source.
NULL_MARKERS = ("NA", "N/A", "n/a", "NaN", "nan", "NULL", "null", "None", "#N/A", "?", "-")
HEAD_BYTES = 1 << 16  # of the first file: enough rows to sniff, never the whole file
_SNIFF_ROWS = 100
_NAME_LIKE = re.compile(r"[^\W\d]\w*(?:[ .\-/]\w+)*", re.UNICODE)
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(
    r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?inf(?:inity)?", re.IGNORECASE
)
_NUMBER_TEXT = f"^(?:{_INT.pattern}|{_FLOAT.pattern})$"  # is_number's syntax, for Arrow (RE2)


def file_format(path: str) -> str:
    """The source format of a file, from its name; ConfigError for a name that tells none."""
    fmt = next((f for f in registry.formats_of_name(path) if f in INIT_FORMATS), None)
    if fmt is not None:
        return fmt
    _, ext, compression = registry.split_suffix(path)
    owners = [f for f in registry.formats_of_extension(ext) if f in INIT_FORMATS] if ext else []
    if owners and compression:
        read = registry.describe(owners[0]).compressed
        why = (
            f"{owners[0]} files are read compressed as {', '.join(read)}"
            if read
            else f"{owners[0]} files compress their data inside"
        )
        raise ConfigError(
            "--source",
            f"{path}: a compressed {owners[0]} file ({compression}) cannot be read; {why}",
        )
    known_endings = known_extensions()
    known = ", ".join(known_endings)
    if not ext:
        reason = f"its name has no extension to tell its format ({known})"
    else:
        reason = f"unknown file type {ext!r} ({known}){did_you_mean(ext, known_endings)}"
    raise ConfigError("--source", f"{path}: {reason}")


def known_extensions() -> tuple[str, ...]:
    """The file name endings `init` tells a format by."""
    return tuple(
        e for e in registry.extensions() if registry.formats_of_extension(e)[0] in INIT_FORMATS
    )


# --- delimited text -------------------------------------------------------------------------


def decode_head(head: bytes, whole: bool) -> tuple[str, str]:
    """(the text of a file's first bytes, its encoding): UTF-8 (a byte order mark allowed),
    UTF-16 with a byte order mark, else Windows-1252, else Latin-1 (which decodes anything).
    `whole`: the bytes are the whole file (a character cut at the end is then an error)."""
    candidates: tuple[str, ...]
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        candidates = ("utf-16",)
    else:
        candidates = ("utf-8", "cp1252", "latin-1")
    for encoding in candidates:
        decoder = codecs.getincrementaldecoder(encoding)()
        try:
            text = decoder.decode(head, final=whole)
        except UnicodeDecodeError:
            continue
        return text.removeprefix("\ufeff"), codecs.lookup(encoding).name
    raise AssertionError("latin-1 decodes every byte")  # pragma: no cover


def sample_rows(text: str, delimiter: str, whole: bool, limit: int = _SNIFF_ROWS) -> list[list]:
    """The first rows of delimited text, as the csv reader splits them; blank lines skipped,
    and a last row that may be cut short (the text is a file's head) dropped."""
    rows = []
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=False)
    try:
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip(" \t")):
                continue
            rows.append(row)
            if len(rows) > limit:
                break
    except csv.Error:  # quoting the strict reader refuses: what came before still counts
        pass
    if not whole or len(rows) > limit:
        rows = rows[:-1] if len(rows) > 1 else rows
    return rows[:limit]


def sniff_delimiter(text: str, whole: bool, preferred: str = ",") -> str | None:
    """The delimiter that splits the rows of `text` alike into more than one field; None when
    no candidate does (one column, or not delimited text)."""
    best, best_score = None, (0.0, 0)
    order = (preferred, *(d for d in DELIMITERS if d != preferred))
    for delimiter in order:
        if delimiter not in text:
            continue
        rows = sample_rows(text, delimiter, whole)
        if not rows:
            continue
        widths = collections.Counter(len(r) for r in rows)
        width, count = widths.most_common(1)[0]
        if width < 2:
            continue
        score = (count / len(rows), width)
        if score[0] > best_score[0] or (score[0] == best_score[0] and best is None):
            best, best_score = delimiter, score
    if best is not None and best_score[0] < 0.5:
        return None
    return best


def has_header(rows: list[list[str]]) -> bool:
    """Whether the first row names the columns. Votes per column: a non-number above numbers is
    a name, a number on top is data; with text columns only, the first row is a header when its
    cells look like names (distinct, not empty, never repeated below). A header's empty or
    repeated cells are renamed (`column_names`)."""
    if not rows:
        return False
    first, rest = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
    votes = 0
    for i, cell in enumerate(first):
        column = [r[i] for r in rest if r[i].strip()]
        if is_number(cell):
            votes -= 1
        elif cell.strip() and column and all(is_number(v) for v in column):
            votes += 1
    if votes:
        return votes > 0
    if len(set(first)) != len(first):
        return False
    for i, cell in enumerate(first):
        if not _NAME_LIKE.fullmatch(cell.strip()) or cell in {r[i] for r in rest}:
            return False
    return True


def is_number(text: str) -> bool:
    """Text an `int` or `float` feature reads (`transforms.schema`'s syntax; NaN is not one)."""
    stripped = text.strip(SPACE)
    return bool(_INT.fullmatch(stripped) or _FLOAT.fullmatch(stripped))


def null_markers(columns: Iterable[list | pa.ChunkedArray]) -> list[str]:
    """The NULL_MARKERS that stand for missing values: those found in a column whose other
    values are all numbers (at least one). Columns are a source's text values (None missing),
    as lists or as Arrow columns (the CSV reader's)."""
    found: set[str] = set()
    for values in columns:
        if isinstance(values, pa.ChunkedArray):
            markers, others, numbers = _arrow_markers(values)
        else:
            markers = {v for v in values if v in NULL_MARKERS}
            rest = [v for v in values if v is not None and v not in NULL_MARKERS] if markers else []
            others, numbers = bool(rest), all(is_number(v) for v in rest)
        if markers and others and numbers:
            found |= markers
    return [m for m in NULL_MARKERS if m in found]


def _arrow_markers(values: pa.ChunkedArray) -> tuple[set[str], bool, bool]:
    """(the markers in a column, whether it holds other values, whether those are numbers)."""
    listed = pc.is_in(values, value_set=pa.array(NULL_MARKERS))
    markers = set(pc.unique(values.filter(listed)).to_pylist())
    if not markers:
        return markers, False, False
    others = values.filter(pc.invert(listed))  # nulls are dropped by the filter
    if not len(others):
        return markers, False, False
    return markers, True, numbers(others) == len(others)


def numbers(values: list | pa.Array) -> int:
    """How many of the text values are numbers by `is_number`'s syntax."""
    if isinstance(values, list):
        return sum(is_number(v) for v in values)
    trimmed = pc.ascii_trim_whitespace(values)  # ASCII whitespace, as SPACE
    found = pc.match_substring_regex(trimmed, _NUMBER_TEXT, ignore_case=True)
    return int(pc.sum(found).as_py() or 0)


def holds_any(values: list | pa.ChunkedArray, markers: Iterable[str]) -> bool:
    """Whether a column (as `null_markers` takes it) holds one of the `markers`."""
    wanted = set(markers)
    if isinstance(values, pa.ChunkedArray):
        return bool(pc.any(pc.is_in(values, value_set=pa.array(sorted(wanted)))).as_py())
    return any(v in wanted for v in values)


def column_names(header: list[str] | None, width: int) -> tuple[list[str], bool]:
    """(the feature names of a CSV's columns, whether they differ from the header's): a file
    without a header gets column_1, column_2, ...; a header cell that cannot name a feature
    (empty, a control character, longer than 200 bytes, a repeat) is renamed the same way."""
    if header is None:
        return [f"column_{i + 1}" for i in range(width)], True
    names: list[str] = []
    for i, cell in enumerate(header):
        usable = cell.strip() and cell.isprintable() and len(cell.encode()) <= MAX_NAME_BYTES
        name = cell if usable else ""
        name = name or f"column_{i + 1}"
        base, n = name, 1
        while name in names:
            n += 1
            name = f"{base}_{n}"
        names.append(name)
    return names, names != header
