"""Reads CSV files into chunks of raw records.

Two parsers with one behaviour. Python's C `csv` module (strict mode) is the reference: quoted
fields, embedded delimiters and newlines, CRLF and a header row are its job, and we add line
tracking (a rejected record names its first line and carries its exact text), null markers, and
rejection of rows whose field count does not match the header. A UTF-8 byte order mark at the
start of a file is dropped (it is not part of the first column's name).

Blank lines are neither records nor the header, wherever they are (a file of blank lines has no
records): a blank line is a line of nothing but spaces and tabs, outside quotes. A line holding
the delimiter is a row of empty fields (with `delimiter: "\\t"`, a line of tabs), and so is
not blank; in a one-column file a value of only spaces is a blank line, not a record.

Header names are text: a byte the encoding cannot decode is written as a `\\xNN` escape (a
header `id,na`, byte 0xFF, `me` gives the columns `id` and `na\\xffme`, backslash included),
so such a column is one that nothing reads, counted among the source's ignored fields under that
name, rather than a reason to refuse the file or its every record. A header that is a single
column holding `;`, a tab or `|`, read with the default delimiter `,`, is a file written with
another delimiter: the job fails (`FileError`) naming the delimiter to set, instead of
rejecting every row.

The fast path parses UTF-8 files with Arrow's multithreaded C++ CSV reader, a block of records at
a time, straight into Arrow string columns. Record boundaries and line numbers come from a
vectorized scan of the bytes: a newline ends a record when an even number of quotes precede it.
That scan is only valid for well-formed quoting, so it also checks every quote (an opening quote
starts a field, a closing one ends it or doubles); a block Arrow rejects (a wrong field count)
goes through the Python parser, and so does the rest of a file from the first malformed quote, a
lone CR or a NUL byte on. Values stay text here; `transforms.schema` types them.

Longer than most modules because the fast path (Arrow's CSV reader on blocks cut by a numpy
quote-parity scan) and its reference fallback (the `csv` module) must give the same records,
line numbers and rejections; keeping both side by side keeps that contract in view.
"""

from __future__ import annotations

import codecs
import csv
import dataclasses
import io
import itertools
import json
from typing import Any, BinaryIO, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from transforms.contract.config import OptionError, SourceOptions, SourceSpec
from transforms.files import FileError
from transforms.records import (
    CHUNK_ROWS,
    MAX_LINE_CHARS,
    RawChunk,
    Rejected,
    location,
    printable,
    rejection,
    rest_of_line,
)
from transforms.sources.registry import FILE_COMPRESSIONS, Format, OptionsReader

MAX_CHARS = MAX_LINE_CHARS  # a longer line or field is rejected, never held whole
TOO_LONG = "csv: a line or field longer than 64 Mi characters, not read"
csv.field_size_limit(MAX_CHARS)
_EMPTY_ONLY = frozenset([""])
_READ_BYTES = 1 << 20
_MAX_BLOCK = 16 << 20  # a chunk of long records may hold fewer than chunk_rows
_QUOTE, _LF, _CR = ord('"'), ord("\n"), ord("\r")
_BLANK = " \t"  # the characters of a blank line (but the delimiter), besides its line end
_OTHER_DELIMITERS = ";\t|"  # what a one-column header read with `,` may really be split by
ARROW = True  # False: every file goes through the csv module (the reference the tests compare)


@dataclasses.dataclass(frozen=True)
class CsvOptions(SourceOptions):
    """The options of a csv source: its delimiter, header or column names, null markers, text
    encoding, and the delimiter of a list feature's values within a cell."""

    delimiter: str = ","
    header: bool = True
    columns: list[str] | None = None  # the column names; None: the header row's
    null_values: list[str] = dataclasses.field(default_factory=lambda: [""])
    encoding: str = "utf-8"  # a codec's canonical name
    list_delimiter: str = "|"

    @property
    def cell_list_delimiter(self) -> str | None:
        return self.list_delimiter


def options(raw: dict[str, Any]) -> CsvOptions:
    """The csv options, checked, with their defaults."""
    opts = OptionsReader(raw)
    delimiter = opts.get("delimiter", ",")
    if not isinstance(delimiter, str) or len(delimiter) != 1:
        raise OptionError("delimiter", f"{delimiter!r} must be one character")
    header = opts.boolean("header", True)
    columns = opts.strings("columns", None)
    if not header and not columns:
        raise OptionError("columns", "is required when header is false")
    out = CsvOptions(
        delimiter=delimiter,
        header=header,
        columns=columns or None,
        null_values=opts.strings("null_values", [""]),
        encoding=opts.encoding(),
        list_delimiter=opts.string("list_delimiter", "|"),
    )
    opts.done()
    return out


def parse_csv(
    stream: BinaryIO, path: str, source: SourceSpec, chunk_rows: int = CHUNK_ROWS
) -> Iterator[RawChunk | Rejected]:
    """Yields chunks of raw records and, for unparseable rows, `Rejected` records."""
    opts = source.options_as(CsvOptions)
    if ARROW and _arrow_can_read(opts):
        yield from _ArrowCsv(stream, path, source, chunk_rows).items()
    else:
        text = _text(stream, opts.encoding)
        yield from _python_records(text, path, source, None, 0, chunk_rows)


parse = parse_csv
TAB_SEPARATED = (".tsv", ".tab")  # file endings of tab-separated values
FORMAT = Format(
    name="csv",
    kind="file",
    options_type=CsvOptions,
    options=options,
    reader=parse_csv,
    extensions=(".csv", *TAB_SEPARATED, ".txt"),
    compressed=FILE_COMPRESSIONS,
    splittable=True,
)


def _arrow_can_read(opts: CsvOptions) -> bool:
    delimiter = opts.delimiter
    return (
        codecs.lookup(opts.encoding).name == "utf-8"
        and delimiter.isascii()
        and delimiter not in '"\r\n'
    )


def _text(stream: BinaryIO, encoding: str, file_start: bool = True) -> io.TextIOWrapper:
    """The text of a file (or, with `file_start` False, of a part of it that starts later on); a
    UTF-8 byte order mark at the start of the file is dropped (`utf-8-sig`)."""
    if file_start and codecs.lookup(encoding).name == "utf-8":
        encoding = "utf-8-sig"
    return io.TextIOWrapper(stream, encoding=encoding, errors="surrogateescape", newline="")


def _check_columns(path: str, columns: list[str]) -> None:
    if len(set(columns)) != len(columns):
        raise FileError(f"{path}: duplicate column names in {columns!r}")


def _header_columns(path: str, header: list[str], delimiter: str) -> list[str]:
    """The column names of a header row, undecodable bytes as `\\xNN` escapes; a `FileError` for
    a header that says the file has another delimiter."""
    names = [printable(name) for name in header]
    if delimiter == "," and len(names) == 1:
        held = [d for d in _OTHER_DELIMITERS if d in names[0]]
        if held:
            other = max(held, key=names[0].count)
            raise FileError(
                f"{path}: the header has one column {names[0]!r} holding {other!r}: "
                f"set options.delimiter: {json.dumps(other)}"
            )
    return names


def _blank_chars(delimiter: str) -> str:
    """The characters of a blank line, line ends included: a line holding the delimiter is a
    row of empty fields."""
    return (_BLANK + "\r\n").replace(delimiter, "")


def _blank_records(a: np.ndarray, starts: np.ndarray, ends: np.ndarray, delimiter: int):
    """Which of the records `a[starts[i]:ends[i]]` (whole lines, sound quoting) are blank lines."""
    blank_bytes = np.frombuffer(_blank_chars(chr(delimiter)).encode("ascii"), np.uint8)
    blank = np.zeros(len(ends), bool)
    if not len(ends):
        return blank
    # Only a record that starts with a blank character can be blank: most files have none, and
    # then the test costs one gather.
    maybe = np.flatnonzero(np.isin(a[np.minimum(starts, len(a) - 1)], blank_bytes))
    if len(maybe):
        other = np.concatenate(([0], np.cumsum(~np.isin(a, blank_bytes))))
        blank[maybe] = other[ends[maybe]] == other[starts[maybe]]
    return blank


def _null_columns(rows: list[list[str]], columns: list[str], nulls: frozenset) -> dict[str, list]:
    values = {}
    for name, column in zip(columns, zip(*rows)):
        # Most columns hold no null marker: a C-level scan spares them the per-value pass.
        if nulls == _EMPTY_ONLY:
            values[name] = [v or None for v in column] if "" in column else list(column)
        elif any(marker in column for marker in nulls):
            values[name] = [None if v in nulls else v for v in column]
        else:
            values[name] = list(column)
    return values


# --- the reference parser: Python's csv module --------------------------------------------------


def _python_records(
    text: io.TextIOBase,
    path: str,
    source: SourceSpec,
    columns: list[str] | None,
    line0: int,
    chunk_rows: int,
) -> Iterator[RawChunk | Rejected]:
    """Parses `text`, whose first line is line `line0 + 1` of the file.

    With `columns` None, they come from the configuration or the header row.
    """
    opts = source.options_as(CsvOptions)
    window = _LineWindow(text)
    reader = csv.reader(window.lines, delimiter=opts.delimiter, strict=True)
    nulls = frozenset(opts.null_values)
    blank_chars = _blank_chars(opts.delimiter)

    def blank(values: list[str], start: int, end: int) -> bool:
        """Whether the row read from lines start..end is a blank line (a row of more than one
        field is not: a line of one field is blank when it is nothing but blank characters)."""
        if not values:
            return True
        return (
            len(values) == 1
            and end - start == 1
            and not window.take(start, end)[0].strip(blank_chars)
        )

    if columns is None:
        columns = opts.columns
        if opts.header:
            try:
                start = reader.line_num
                header = next(reader)
                while len(header) <= 1 and blank(header, start, reader.line_num):
                    start = reader.line_num
                    header = next(reader)
            except StopIteration:
                return
            except csv.Error as e:
                raise FileError(f"{path}: unreadable CSV header: {e}") from None
            if columns is None:
                columns = _header_columns(path, header, opts.delimiter)
        assert columns is not None  # given when there is no header (options)
        _check_columns(path, columns)
    width = len(columns)
    rows: list[list[str]] = []
    starts: list[int] = []
    ends: list[int] = []
    prev = reader.line_num  # lines consumed so far: the next record starts on line prev + 1
    window.mark(prev)

    def chunk() -> RawChunk:
        first, end = starts[0], ends[-1]
        lines = window.take(first, end)
        window.mark(end)
        offsets = [0, *itertools.accumulate(map(len, lines))]
        return RawChunk(
            source.name,
            path,
            _null_columns(rows, columns, nulls),
            [line0 + s + 1 for s in starts],
            "".join(lines),
            [offsets[s - first] for s in starts],
            [offsets[e - first] for e in ends],
            text=True,
        )

    done = False
    while not done:
        try:
            for values in reader:
                cur = reader.line_num
                if window.overlong and window.holds_overlong(prev, cur):
                    where = location(path, line0 + prev + 1)
                    record = f"<{window.chars(prev, cur)} characters>"
                    yield rejection(source.name, where, TOO_LONG, record)
                elif len(values) <= 1 and blank(values, prev, cur):
                    pass  # a blank line is not a record
                elif len(values) == width:
                    rows.append(values)
                    starts.append(prev)
                    ends.append(cur)
                    if len(rows) >= chunk_rows:
                        yield chunk()
                        rows, starts, ends = [], [], []
                else:
                    reason = f"csv: expected {width} fields, got {len(values)}"
                    where = location(path, line0 + prev + 1)
                    yield rejection(source.name, where, reason, window.text(prev, cur))
                if not rows:  # nothing pending: the lines read so far are needed no more
                    window.mark(cur)
                prev = cur
            done = True
        except csv.Error as e:
            cur = reader.line_num
            where = location(path, line0 + prev + 1)
            reason, record = f"csv: {e}", None
            if str(e) == "unexpected end of data":  # a quote left open swallows the rest
                reason = (
                    f"csv: a quote opened in this record is never closed: the {cur - prev} "
                    "lines to the end of the file are one record"
                )
            if str(e).startswith("field larger than field limit") or (
                window.overlong and window.holds_overlong(prev, cur)
            ):
                reason, record = TOO_LONG, f"<{window.chars(prev, cur)} characters>"
            yield rejection(source.name, where, reason, record or window.text(prev, cur))
            if not rows:
                window.mark(cur)
            prev = cur
    if rows:
        yield chunk()


class _TooLong(str):
    """A line longer than MAX_CHARS, read in pieces and not kept: an empty line standing for
    its `chars` characters (the window notes its number: its record is rejected)."""

    chars: int = 0

    @classmethod
    def after(cls, start: str, text: io.TextIOBase) -> _TooLong:
        """The line that begins with `start`, read to its end from `text`."""
        line = cls("\n")
        line.chars = rest_of_line(text, start, MAX_CHARS)
        return line


class _LineWindow:
    """The input lines the parser has read, kept from a mark on, to give records their text.

    Lines are read in blocks (C `readlines`) and chained in C, so tracking costs no Python call
    per line; `reader.line_num` says how many lines each record took.
    """

    def __init__(self, text: io.TextIOBase):
        self._text = text
        self._buffer: list[str] = []
        self._base = 0  # line number (0-based) of _buffer[0]
        self._read = 0  # lines read so far
        self.overlong: dict[int, int] = {}  # line number (0-based) → its characters, not kept
        self.lines = itertools.chain.from_iterable(iter(self._read_block, []))

    def _read_block(self) -> list[str]:
        block: list[str] = []
        size = 0
        while size < 1 << 16:  # lines as `readlines(65536)` gives them, each bounded
            line = self._text.readline(MAX_CHARS + 1)
            if not line:
                break
            if len(line) > MAX_CHARS and not line.endswith("\n"):
                line = _TooLong.after(line, self._text)
                self.overlong[self._read + len(block)] = line.chars
            block.append(line)
            size += len(line)
        self._read += len(block)
        self._buffer.extend(block)
        return block

    def holds_overlong(self, start: int, end: int) -> bool:
        """Whether lines start..end hold an overlong line (forgotten once asked for)."""
        found = [n for n in self.overlong if start <= n < end]
        for n in found:
            del self.overlong[n]
        return bool(found)

    def chars(self, start: int, end: int) -> int:
        """The characters of lines start..end, an overlong line's counted whole."""
        return sum(getattr(line, "chars", len(line)) for line in self.take(start, end))

    def take(self, start: int, end: int) -> list[str]:
        """Lines start..end (0-based, end excluded)."""
        return self._buffer[start - self._base : end - self._base]

    def text(self, start: int, end: int) -> str:
        return "".join(self.take(start, end))

    def mark(self, start: int) -> None:
        """Forgets the lines before `start`."""
        del self._buffer[: start - self._base]
        self._base = start


# --- the fast path: Arrow's C++ parser on blocks of whole records ---------------------------------


class _Scan:
    """Record boundaries of a byte buffer that starts at a record, and whether quoting is sound.

    `ends[i]` is the offset just past record i's terminating newline (or the end of the file).
    Quotes are sound when every quote that opens (even count before it) follows a delimiter, a
    newline, the buffer start or a closing quote, and every quote that closes is followed by a
    delimiter, CR, LF, a quote or the end of the file: then the parity rule finds exactly the
    records the csv module finds.
    """

    def __init__(self, data: memoryview, delimiter: int, eof: bool):
        a = np.frombuffer(data, np.uint8)
        quotes = np.flatnonzero(a == _QUOTE)
        self.newlines = np.flatnonzero(a == _LF)
        before = np.searchsorted(quotes, self.newlines)
        ends = self.newlines[(before & 1) == 0] + 1
        if eof and len(a) and len(quotes) % 2 == 0 and (not len(ends) or ends[-1] != len(a)):
            ends = np.append(ends, len(a))
        self.ends = ends
        limit = int(ends[-1]) if len(ends) else 0
        self.sound = True
        if limit:
            q = quotes[: np.searchsorted(quotes, limit)]
            opening, closing = q[0::2], q[1::2]
            after_open = a[opening[opening > 0] - 1]
            closing_inner = closing[closing + 1 < len(a)]
            after_close = a[closing_inner + 1]
            head = a[:limit]
            cr = np.flatnonzero(head == _CR)
            self.sound = (
                bool(np.isin(after_open, (delimiter, _LF, _QUOTE)).all())
                and bool(np.isin(after_close, (delimiter, _CR, _LF, _QUOTE)).all())
                and (eof or len(closing_inner) == len(closing))
                and bool((cr + 1 < limit).all() and (a[cr[cr + 1 < limit] + 1] == _LF).all())
                and not (head == 0).any()
            )


def _emptied(a: np.ndarray, starts: np.ndarray, ends: np.ndarray, blank: np.ndarray):
    """The bytes `a` of whole records without the spaces and tabs of its blank lines (their line
    ends stay, so that each is an empty line); `a` itself when it has none."""
    spaced = np.flatnonzero(blank & (a[starts] != _LF) & (a[starts] != _CR))
    if not len(spaced):
        return a
    keep = np.ones(len(a), bool)
    for i in spaced:
        start, end = int(starts[i]), int(ends[i])
        keep[start:end] = np.isin(a[start:end], (_CR, _LF))
    return a[keep]


class _Chained(io.RawIOBase):
    """A byte stream: some bytes already read, then the rest of a stream."""

    def __init__(self, head: bytes, tail: BinaryIO):
        self._head = memoryview(head)
        self._tail = tail

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if len(self._head):
            n = min(len(b), len(self._head))
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._tail.read(len(b))
        b[: len(data)] = data
        return len(data)


class _ArrowCsv:
    def __init__(self, stream: BinaryIO, path: str, source: SourceSpec, chunk_rows: int):
        self._stream = stream
        self._path = path
        self._source = source
        self._chunk_rows = chunk_rows
        self._eof = False
        opts = source.options_as(CsvOptions)
        self._delimiter = ord(opts.delimiter)
        self._nulls = list(opts.null_values)
        self._parse_options = pacsv.ParseOptions(
            delimiter=opts.delimiter,
            quote_char='"',
            double_quote=True,
            escape_char=False,
            newlines_in_values=True,
            ignore_empty_lines=True,
        )

    def items(self) -> Iterator[RawChunk | Rejected]:
        opts = self._source.options_as(CsvOptions)
        columns = opts.columns
        buf = self._read_to(b"", _READ_BYTES)
        if buf.startswith(codecs.BOM_UTF8):  # not part of the first column name
            buf = buf[len(codecs.BOM_UTF8) :]
        line0 = 0
        if opts.header:
            want = _READ_BYTES
            while True:  # until the first line that is not blank: the header
                scan = _Scan(memoryview(buf), self._delimiter, self._eof)
                if not scan.sound:
                    break
                starts = np.concatenate(([0], scan.ends[:-1]))
                a = np.frombuffer(buf, np.uint8)
                filled = np.flatnonzero(~_blank_records(a, starts, scan.ends, self._delimiter))
                if len(filled) or self._eof:
                    break
                want = max(want, len(buf)) * 2
                buf = self._read_to(buf, want)
            # records up to the end of the file: no quote left open at the end
            whole = bool(len(scan.ends)) and int(scan.ends[-1]) == len(buf)
            if not scan.sound or (not len(filled) and not whole):
                yield from self._python_rest(buf, None, 0)
                return
            if not len(filled):
                return  # nothing but blank lines: no header, no records
            start, end = int(starts[filled[0]]), int(scan.ends[filled[0]])
            try:
                text = io.StringIO(buf[start:end].decode("utf-8", "surrogateescape"), newline="")
                header = next(csv.reader(text, delimiter=opts.delimiter, strict=True), [])
            except csv.Error:
                yield from self._python_rest(buf, None, 0)
                return
            if columns is None:
                columns = _header_columns(self._path, header, opts.delimiter)
            line0 = int(np.searchsorted(scan.newlines, end))
            buf = buf[end:]
        assert columns is not None  # given when there is no header (options)
        _check_columns(self._path, columns)
        if not columns:
            yield from self._python_rest(buf, columns, line0)
            return
        read = pacsv.ReadOptions(column_names=columns, block_size=1 << 26)
        convert = pacsv.ConvertOptions(
            column_types={name: pa.string() for name in columns},
            null_values=self._nulls,
            strings_can_be_null=True,
            quoted_strings_can_be_null=True,
        )
        want = _READ_BYTES
        while True:
            buf = self._read_to(buf, want)
            if not buf:
                return
            scan = _Scan(memoryview(buf), self._delimiter, self._eof)
            if not scan.sound or (self._eof and not len(scan.ends)):
                # malformed quoting, or an unterminated quote that runs to the end of the file
                yield from self._python_rest(buf, columns, line0)
                return
            starts = np.concatenate(([0], scan.ends[:-1]))
            tail = len(buf) - (int(scan.ends[-1]) if len(scan.ends) else 0)
            if max(tail, int(np.max(scan.ends - starts, initial=0))) > MAX_CHARS:
                # a record longer than the limit: the reference reader rejects it without
                # holding it, and reads on
                yield from self._python_rest(buf, columns, line0)
                return
            a = np.frombuffer(buf, np.uint8)
            blank = _blank_records(a, starts, scan.ends, self._delimiter)
            nonblank = np.flatnonzero(~blank)
            if len(nonblank) >= self._chunk_rows:
                last = int(nonblank[self._chunk_rows - 1])
            elif not self._eof and (len(buf) < _MAX_BLOCK or not len(scan.ends)):
                want = len(buf) + _READ_BYTES  # too few whole records yet: read on
                continue
            else:
                last = len(scan.ends) - 1
            cut = int(scan.ends[last])
            keep = nonblank[nonblank <= last]
            lines = np.searchsorted(scan.newlines, starts[keep]) + (line0 + 1)
            yield from self._block(
                buf[:cut],
                columns,
                read,
                convert,
                starts[keep],
                scan.ends[keep],
                lines,
                line0,
                _emptied(a[:cut], starts[: last + 1], scan.ends[: last + 1], blank[: last + 1]),
            )
            line0 += int(np.searchsorted(scan.newlines, cut))
            buf = buf[cut:]
            want = _READ_BYTES

    def _read_to(self, buf: bytes, size: int) -> bytes:
        """`buf` and what follows it in the file, up to `size` bytes (less at the end)."""
        while not self._eof and len(buf) < size:
            piece = self._stream.read(max(size - len(buf), _READ_BYTES))
            if piece:
                buf += piece
            else:
                self._eof = True
        return buf

    def _block(self, block, columns, read, convert, starts, ends, lines, line0, arrow_input):
        """The records of `block` (at `starts`/`ends`); Arrow parses `arrow_input`, the block
        with its blank lines emptied (Arrow skips empty lines, not lines of spaces)."""
        if not len(starts):
            return
        try:
            table = pacsv.read_csv(
                pa.BufferReader(pa.py_buffer(arrow_input)),
                read_options=read,
                parse_options=self._parse_options,
                convert_options=convert,
            )
        except (pa.ArrowInvalid, UnicodeDecodeError):
            table = None
        if table is None or table.num_rows != len(starts):
            # a wrong field count (or any disagreement): the reference parser words the reasons
            text = _text(io.BytesIO(block), "utf-8", file_start=False)
            yield from _python_records(
                text, self._path, self._source, columns, line0, self._chunk_rows
            )
            return
        values = {
            name: (col.chunk(0) if col.num_chunks == 1 else col.combine_chunks())
            for name, col in zip(columns, table.columns)
        }
        yield RawChunk(
            self._source.name,
            self._path,
            values,
            lines.tolist(),
            block,
            starts.tolist(),
            ends.tolist(),
            text=True,
        )

    def _python_rest(self, buf: bytes, columns, line0):
        # items() has dropped the byte order mark already
        stream = io.BufferedReader(_Chained(buf, self._stream))
        text = _text(stream, self._source.options_as(CsvOptions).encoding, file_start=False)
        yield from _python_records(text, self._path, self._source, columns, line0, self._chunk_rows)
