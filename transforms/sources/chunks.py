"""Cuts the records a reader parses into chunks of `chunk_rows` records.

Readers parse records in units of their own (a row group's batch, a block of lines, an Avro data
block, one JSON line) whose sizes have nothing to do with a good chunk: a chunk is a Beam element,
and small elements cost. A `ChunkBuilder` keeps the records handed to it until it has
`chunk_rows` of them, and yields each full chunk as soon as it has one.

Records come either as columns (`add`: a list of values per field, as Parquet batches and text
blocks are parsed), or as rows (`add_rows`: one object per record, as Avro and JSON records are
parsed; `add_row` for one), which are turned into columns only when a chunk is cut
(`columns_of`), so that the fields of a chunk are those of its own records.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Mapping

from transforms.records import RawChunk

Columns = dict[str, list[Any]]


class ChunkBuilder:
    """Records parsed but not yet delivered, with their line numbers (and record texts).

    `columns_of`: the columns of a list of rows (row-major records, `add_rows`).
    `raw_fields`: the raw-text fields of a chunk (`RawChunk.raw_text`, `starts`, `ends`) from its
    records' texts, for formats that keep them; binary formats keep none.
    `text`: every value is a string (`RawChunk.text`).
    """

    def __init__(
        self,
        source: str,
        path: str,
        chunk_rows: int,
        *,
        columns_of: Callable[[list[Any]], Columns] | None = None,
        raw_fields: Callable[[list[str]], dict[str, Any]] | None = None,
        text: bool = False,
    ):
        self._source, self._path, self._chunk_rows = source, path, chunk_rows
        self._columns_of, self._raw_fields, self._text = columns_of, raw_fields, text
        self._columns: Columns = {}
        self._rows: list[Any] = []
        self._lines: list[int] = []
        self._raws: list[str] = []

    def add(
        self,
        columns: Mapping[str, Iterable[Any]],
        lines: Iterable[int],
        raws: Iterable[str] = (),
    ) -> Iterator[RawChunk]:
        """Adds records given as columns, with their line numbers (and texts).

        Records whose fields are not those of the records waiting are not added to them: the
        waiting records are delivered first, as a shorter chunk, so that every column of a chunk
        has a value (or None) for each of its records."""
        if self._lines and columns.keys() != self._columns.keys():
            yield from self.flush()
        if not self._lines:
            self._columns = {name: [] for name in columns}
        for name, values in columns.items():
            self._columns[name].extend(values)
        yield from self._added(lines, raws)

    def add_rows(
        self, rows: Iterable[Any], lines: Iterable[int], raws: Iterable[str] = ()
    ) -> Iterator[RawChunk]:
        """Adds records given as rows (turned into columns by `columns_of`), with their line
        numbers (and texts)."""
        self._rows.extend(rows)
        yield from self._added(lines, raws)

    def add_row(self, row: Any, line: int, raw: str | None = None) -> RawChunk | None:
        """Adds one record given as a row; returns the chunk it completes, if it does.

        For readers that parse a record at a time (JSON lines), where a generator per record
        would cost a good part of what parsing the record does."""
        self._rows.append(row)
        self._lines.append(line)
        if raw is not None:
            self._raws.append(raw)
        return self._take(self._chunk_rows) if len(self._lines) >= self._chunk_rows else None

    def flush(self) -> Iterator[RawChunk]:
        """The records still waiting, as one last chunk (nothing when none are)."""
        if self._lines:
            yield self._take(len(self._lines))

    def _added(self, lines: Iterable[int], raws: Iterable[str]) -> Iterator[RawChunk]:
        self._lines.extend(lines)
        self._raws.extend(raws)
        while len(self._lines) >= self._chunk_rows:
            yield self._take(self._chunk_rows)

    def _take(self, n: int) -> RawChunk:
        if self._columns_of is None:
            columns = {name: values[:n] for name, values in self._columns.items()}
            for values in self._columns.values():
                del values[:n]
        else:
            columns = self._columns_of(self._rows[:n])
            del self._rows[:n]
        raws = {} if self._raw_fields is None else self._raw_fields(self._raws[:n])
        lines = self._lines[:n]
        del self._lines[:n], self._raws[:n]
        return RawChunk(self._source, self._path, columns, lines, **raws, text=self._text)
