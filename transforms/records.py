"""The units that flow between ETL stages: columnar chunks of raw records, and rejected records.

Beam elements are chunks of a few thousand records, never single records: a per-element step
costs tens of microseconds here, more than all the per-record work together. Chunks are columnar
(one list or Arrow array per field) because that is what validation, Arrow and pickling are fast
on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import itertools
import json
import operator
from typing import Any, Iterator, NamedTuple, Sequence

import numpy as np
import pyarrow as pa

from transforms import progress

CHUNK_ROWS = 8192
REJECTED = "rejected"
COUNTS = "counts"
STATS = "statistics"
FACTS = "facts"


class RecordError(ValueError):
    """An expected data error: the record is rejected with `reason`, the job goes on."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Reason(str):
    """A rejection reason that also shows the offending value.

    As text it is the reason alone, the same for every value, so that it is counted as one
    reason (the manifest's `rejected.reasons`) and compares equal to the plain text; `value` (the
    value as shown: cut short, escaped) goes only to the rejected record (`Rejected.value`).
    """

    value: str

    def __new__(cls, text: str, value: str) -> Reason:
        reason = super().__new__(cls, text)
        reason.value = value
        return reason

    def __reduce__(self):
        return Reason, (str(self), self.value)


@dataclasses.dataclass
class RawChunk:
    """Consecutive records of one file of one source, as parallel columns.

    `columns` maps a field name to its values (None = missing), as a list or an Arrow array;
    `text` says every value is a string (CSV), which lets validation skip type inspection.
    `lines` are the first line of each record in its file (also the tie-breaker among
    duplicates; the record's number in files without lines). The input text of record i is
    `raw_text[starts[i]:ends[i]]` (UTF-8 when bytes), kept for the rejected output; binary
    formats keep none, and a rejected record shows its fields as JSON instead.
    """

    source: str
    path: str
    columns: dict[str, list[Any] | pa.Array]
    lines: list[int]
    raw_text: str | bytes | None = None
    starts: list[int] | None = None
    ends: list[int] | None = None
    text: bool = False

    def __len__(self) -> int:
        return len(self.lines)

    def raw(self, i: int) -> str:
        """Record i's input text; without one (binary formats), its fields as JSON."""
        if self.raw_text is None:
            return record_json(
                {
                    name: column[i].as_py() if isinstance(column, pa.Array) else column[i]
                    for name, column in self.columns.items()
                }
            )
        assert self.starts is not None and self.ends is not None  # set with raw_text
        raw = self.raw_text[self.starts[i] : self.ends[i]]
        return raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else raw

    def values(self, name: str) -> list[Any]:
        """The values of one field as a list (all None when the chunk lacks the field)."""
        column = self.columns.get(name)
        if column is None:
            return [None] * len(self)
        return column.to_pylist() if isinstance(column, pa.Array) else column

    def approx_bytes(self) -> int:
        data = len(self.raw_text) if self.raw_text is not None else 64 * len(self.columns)
        return data + 48 * len(self.lines)

    def take(self, indices: Sequence[int]) -> "RawChunk":
        """The chunk of the records at `indices`, in that order."""
        return self.take_each([indices])[0]

    def take_each(self, groups: Sequence[Sequence[int]]) -> list["RawChunk"]:
        """The chunk of the records at each group of indices, in their order. Arrow columns
        stay Arrow; each chunk gets a copy of its own records' raw text, so that it pickles
        without the others'."""
        lines = np.asarray(self.lines, np.int64)
        if isinstance(self.raw_text, bytes):
            text = np.frombuffer(self.raw_text, np.uint8)
            starts, ends = np.asarray(self.starts, np.int64), np.asarray(self.ends, np.int64)
        out = []
        for indices in groups:
            rows = np.asarray(indices, np.int64)
            raws = {}
            if isinstance(self.raw_text, bytes):
                raws = _gathered(text, starts[rows], ends[rows])
            elif self.raw_text is not None:
                raws = one_line_records([self.raw(i) for i in rows.tolist()])
            columns = {name: _taken(column, rows) for name, column in self.columns.items()}
            out.append(
                RawChunk(
                    self.source, self.path, columns, lines[rows].tolist(), **raws, text=self.text
                )
            )
        return out


MAX_LINE_CHARS = 64 << 20  # a longer line (or CSV field) is rejected by its reader, never held


def rest_of_line(text: Any, piece: str, most: int) -> int:
    """Reads on to the end of the line whose start `piece` is (what `text.readline(n)` gave),
    `most` characters at a time, holding none of it; the line's characters, its end excluded."""
    chars = len(piece)
    while piece and not piece.endswith("\n"):
        piece = text.readline(most)
        chars += len(piece)
    return chars - piece.endswith("\n")


def _taken(column: list[Any] | pa.Array, rows: np.ndarray) -> list[Any] | pa.Array:
    """The values of a column at `rows`."""
    if isinstance(column, pa.Array):
        return column.take(rows)
    if len(rows) < 2:
        return [column[i] for i in rows.tolist()]
    return list(operator.itemgetter(*rows.tolist())(column))


def _gathered(text: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> dict[str, Any]:
    """The raw-text fields of a RawChunk holding the byte ranges [starts, ends) of `text`."""
    lengths = ends - starts
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    at = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
    return {
        "raw_text": text[at].tobytes(),
        "starts": offsets[:-1].tolist(),
        "ends": offsets[1:].tolist(),
    }


def one_line_records(raws: list[str]) -> dict[str, Any]:
    """The raw-text fields of a RawChunk holding these record texts, in order."""
    offsets = [0, *itertools.accumulate(map(len, raws))]
    return {"raw_text": "".join(raws), "starts": offsets[:-1], "ends": offsets[1:]}


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pauses the cyclic garbage collector around bulk work on acyclic data.

    Parsing allocates millions of strings and lists; each allocation burst triggers collections
    that rescan every live object, which doubled the cost of parsing a CSV. Chunks hold no
    reference cycles, so nothing is lost by collecting after the bulk work instead of during it.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclasses.dataclass
class EncodedChunk:
    """Validated, encoded records with their split and order hash, as parallel sequences."""

    split: np.ndarray  # int16 split index per record
    order_hash: np.ndarray  # uint64
    keys: pa.RecordBatch | None  # keyed datasets: key and provenance (transforms.keys.KEYS)
    payload: pa.BinaryArray

    def __len__(self) -> int:
        return len(self.payload)

    def approx_bytes(self) -> int:
        return self.payload.nbytes + 16 * len(self.payload)


class PieceTask(NamedTuple):
    """One piece of a shard to write: the split (by index), the shard, the split's shard count,
    the shard's pieces and which one (`transforms.sink.spill.piece_tasks`)."""

    split: int
    shard: int
    shards: int
    pieces: int
    piece: int


@dataclasses.dataclass(frozen=True)
class ShardFile:
    """A shard as written under the staging folder: its split, path (relative to the dataset),
    records, the duplicates of a key dropped from it, its bytes and SHA-256."""

    split: str
    path: str
    records: int
    duplicates: int
    bytes: int
    sha256: str


def record_json(record: Any) -> str:
    """A record as text for the rejected output: JSON, bytes as (escaped) text."""
    return json.dumps(record, ensure_ascii=False, sort_keys=True, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return str(value)


class Rejected(NamedTuple):
    """A rejected record: its source, where it is (`file:line`, or the file alone), why, the
    record as text, and the offending value where the reason does not name it (`Reason.value`:
    a value not among a feature's allowed values); one line of rejected/*.jsonl (`to_json`, with
    `value` only when there is one), which `from_json` reads back."""

    source: str
    location: str
    reason: str
    record: str
    value: str | None = None

    def to_json(self) -> dict[str, str]:
        out = self._asdict()
        if self.value is None:
            del out["value"]
        return out

    @classmethod
    def from_json(cls, raw: Any) -> Rejected:
        """A line of a rejected file, parsed; ValueError when it is not one."""
        required = set(cls._fields) - {"value"}
        if not isinstance(raw, dict) or not required <= set(raw) <= set(cls._fields):
            raise ValueError(f"not a rejected record (keys {', '.join(cls._fields)})")
        if not all(isinstance(v, str) for v in raw.values()):
            raise ValueError("a rejected record's values are strings")
        return cls(**raw)

    def place(self) -> tuple[str, int]:
        """Where the record is, as (file, line or record number; 0 for a whole file)."""
        path, _, line = self.location.rpartition(":")
        return (path, int(line)) if line.isdigit() else (self.location, 0)


def rejection(source: str, location: str, reason: str, record: Any) -> Rejected:
    """A rejected record, counted in the run's progress; a `Reason` gives it its value."""
    progress.add("rejected", 1)
    if not isinstance(record, str):
        record = record_json(record)
    value = reason.value if isinstance(reason, Reason) else None
    return Rejected(source, location, str(reason), printable(record), value)


def printable(text: str) -> str:
    """Text that encodes as UTF-8: undecodable input bytes (lone surrogates) as \\xNN escapes."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        try:
            return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # other lone surrogates, e.g. from JSON "\\ud800" escapes
            return text.encode("utf-8", "backslashreplace").decode("utf-8")


def read_counter(source_name: str) -> str:
    """The name under which the records read from a source are counted."""
    return f"read/{source_name}"


def ignored_counter(source_name: str, field: str) -> str:
    """The name under which the records with a value in a field nothing reads are counted."""
    return f"ignored/{source_name}/{field}"


def location(path: str, line: int) -> str:
    return f"{path}:{line}"
