"""The units that flow between ETL stages: chunks of raw records and rejected records.

Beam elements are chunks of a few thousand records, never single records: a per-element step
costs tens of microseconds here, more than all the per-record work together.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

CHUNK_ROWS = 8192
REJECTED = "rejected"
COUNTS = "counts"


@dataclasses.dataclass
class RawRow:
    """One input record as read: its fields (None = missing) and where it came from."""

    record_no: int  # ordinal of the record in its file, from 0: the tie-breaker of the sort
    line: int  # first line of the record (1-based), or the row number for non-text sources
    fields: dict[str, Any]
    raw: str  # the input text of the record, for the rejected output


@dataclasses.dataclass
class RawChunk:
    """Consecutive records of one file of one source."""

    source: str
    path: str
    rows: list[RawRow]


def rejection(source: str, location: str, reason: str, record: Any) -> dict[str, Any]:
    """A rejected record as written to rejected/*.jsonl."""
    if not isinstance(record, str):
        record = json.dumps(record, ensure_ascii=False, sort_keys=True, default=str)
    return {"source": source, "location": location, "reason": reason, "record": record}


def location(path: str, line: int) -> str:
    return f"{path}:{line}"
