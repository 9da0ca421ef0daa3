"""The units that flow between ETL stages: columnar chunks of raw records, and rejected records.

Beam elements are chunks of a few thousand records, never single records: a per-element step
costs tens of microseconds here, more than all the per-record work together. Chunks are columnar
(one list per field) because that is what validation, Arrow and pickling are fast on.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
from typing import Any

from apache_beam import coders

CHUNK_ROWS = 8192
REJECTED = "rejected"
COUNTS = "counts"


@dataclasses.dataclass
class RawChunk:
    """Consecutive records of one file of one source, as parallel lists.

    `columns` maps a field name to its values (None = missing); `text` says every value is a
    string (CSV), which lets validation skip type inspection. `record_nos` are ordinals in the
    file (the tie-breaker among duplicates), `lines` the first line of each record, `raws` the
    input text of each record, for the rejected output.
    """

    source: str
    path: str
    columns: dict[str, list[Any]]
    record_nos: list[int]
    lines: list[int]
    raws: list[str]
    text: bool = False

    def __len__(self) -> int:
        return len(self.record_nos)

    def approx_bytes(self) -> int:
        return sum(map(len, self.raws)) + 16 * len(self.raws)

    def take(self, indices: list[int]) -> "RawChunk":
        """The chunk of the records at `indices`, in that order."""
        return RawChunk(
            self.source,
            self.path,
            {name: [col[i] for i in indices] for name, col in self.columns.items()},
            [self.record_nos[i] for i in indices],
            [self.lines[i] for i in indices],
            [self.raws[i] for i in indices],
            self.text,
        )


class ChunkCoder(coders.Coder):
    """Pickles a chunk; estimates its size without pickling it.

    Beam samples element sizes for its metrics by encoding elements; with the default fallback
    coder that means pickling whole chunks a second time just to measure them.
    """

    def encode(self, value: Any) -> bytes:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)

    def decode(self, encoded: bytes) -> Any:
        return pickle.loads(encoded)

    def is_deterministic(self) -> bool:
        return False

    def estimate_size(self, value: Any) -> int:
        return value.approx_bytes()

    def to_type_hint(self):
        return Any


def rejection(source: str, location: str, reason: str, record: Any) -> dict[str, Any]:
    """A rejected record as written to rejected/*.jsonl."""
    if not isinstance(record, str):
        record = json.dumps(record, ensure_ascii=False, sort_keys=True, default=str)
    return {"source": source, "location": location, "reason": reason, "record": record}


def location(path: str, line: int) -> str:
    return f"{path}:{line}"


coders.registry.register_coder(RawChunk, ChunkCoder)
