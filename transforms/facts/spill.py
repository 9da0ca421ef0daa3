"""Facts spill files: a worker's facts written to the staging folder, a bucket at a time, so
that neither the worker nor the shuffle holds them whole.

A worker counts its records into a `FactParts` (`transforms.prepare.Encoder`); once that holds
about `FACTS_SPILL_BYTES` (and at the end of a bundle) it is cut into its hash buckets and
written as one file under `<staging>/_spill/facts/`, the buckets' pickled parts back to back.
What travels on is a `FactsPiece` per bucket (the file and the bytes of that bucket), and the
bucket's merge (`transforms.facts.merge`) reads its pieces one at a time. The files go with the
staging folder's spill folder when the dataset is published; a file of a failed bundle, which
no piece names, too.
"""

from __future__ import annotations

import dataclasses
import pickle
import uuid

from transforms.contract.layout import SPILL_DIR
from transforms.facts.parts import FactParts
from transforms.files import create_file

FACTS_DIR = "facts"  # under the staging folder's spill folder


def facts_folder(staging: str) -> str:
    """Where a run's facts spill files go: under the staging folder's spill folder (deleted
    with it, as `transforms.sink.finalize` publishes the dataset)."""
    return f"{staging}/{SPILL_DIR}/{FACTS_DIR}"


@dataclasses.dataclass(frozen=True)
class FactsPiece:
    """One bucket's facts in a spill file: bytes [start, stop) of `path`, a pickled
    `FactParts`."""

    path: str
    start: int
    stop: int

    def approx_bytes(self) -> int:
        return 64 + len(self.path)


def write_facts(parts: FactParts, folder: str) -> list[tuple[int, FactsPiece]]:
    """Writes `parts`, cut into buckets, as one spill file in `folder` (`facts_folder`);
    (bucket, piece) of each bucket it holds."""
    path = f"{folder}/{uuid.uuid4().hex}.facts"
    pieces = []
    at = 0
    with create_file(path, "application/octet-stream") as f:
        for bucket, part in parts.buckets():
            data = pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL)
            f.write(data)
            pieces.append((bucket, FactsPiece(path, at, at + len(data))))
            at += len(data)
    return pieces


def read_facts(piece: FactsPiece) -> FactParts:
    """The facts a piece names."""
    from apache_beam.io.filesystem import CompressionTypes  # Beam: read back in a pipeline
    from apache_beam.io.filesystems import FileSystems

    size = piece.stop - piece.start
    with FileSystems.open(
        piece.path,
        mime_type="application/octet-stream",
        compression_type=CompressionTypes.UNCOMPRESSED,
    ) as f:
        f.seek(piece.start)
        data = f.read(size)
    if len(data) != size:
        raise OSError(
            f"{piece.path}: facts spill file is truncated ({len(data)} of {size} bytes read "
            f"at {piece.start})"
        )
    return pickle.loads(data)
