"""Validation, keying, encoding and split assignment of records, a chunk at a time.

The output of this stage, `EncodedChunk`, is everything the writer needs: per record its split,
its order hash, its key (for dropping duplicates) and its serialized `tf.train.Example`. A chunk
is validated on the step's thread and encoded, with its statistics, on a helper thread while the
next chunk is validated (`Encoder`).
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms import encode
from transforms.contract.config import DatasetSpec
from transforms.facts.count import FactCounter
from transforms.facts.parts import FactParts
from transforms.facts.spill import FactsPiece, facts_folder, write_facts
from transforms.keys import KeyMaker, key_columns
from transforms.records import (
    EncodedChunk,
    RawChunk,
    Rejected,
    location,
    rejection,
)
from transforms.schema import SourceColumns, Validator
from transforms.split import SplitAssigner, file_identity, identity_hashes, record_hashes
from transforms.stats import DatasetStats, chunk_stats
from transforms.tuning import ENCODE_THREADS, FACTS_SPILL_BYTES


@dataclasses.dataclass
class Batch:
    """Records ready for validation: each source's fields as columns, plus (keyed datasets)
    the key and provenance of each record (`transforms.keys.KEYS`), or (datasets without a
    key) the split and order hashes of each record's identity (`transforms.split`).

    `describe(i)` gives (source, location, raw text) of record i, for the rejected output; it is
    called only for rejected records.
    """

    size: int
    tables: dict[str, SourceColumns]
    keys: pa.RecordBatch | None
    describe: Callable[[int], tuple[str, str, str]]
    identity: tuple[np.ndarray, np.ndarray] | None = None


@dataclasses.dataclass
class Valid:
    """The valid records of a batch: one list column per feature, and (keyed datasets) their
    keys and provenance, or (without a key) the hashes of their identity."""

    columns: list[pa.Array]
    keys: pa.RecordBatch | None
    identity: tuple[np.ndarray, np.ndarray] | None = None


def batch_of_chunk(
    chunk: RawChunk, source_index: int, key_maker: KeyMaker | None, pattern: str | None = None
) -> tuple[Batch, list[Rejected]]:
    """The batch of one source's chunk (union), and the rejected records that have no key.
    `pattern`: the source's `path` (its records' identity is taken from it without a key)."""
    rejected: list[Rejected] = []
    keys = identity = None
    if key_maker is None:
        identity = identity_hashes(chunk.source, file_identity(pattern, chunk.path), chunk.lines)
    else:
        texts, rejected = key_maker.keys(chunk)
        if rejected:
            valid = texts.is_valid()
            chunk = chunk.take(pc.indices_nonzero(valid).to_pylist())
            texts = texts.filter(valid)
        keys = key_columns(texts, source_index, chunk.lines, [chunk.path])
    src, path, lines = chunk.source, chunk.path, chunk.lines
    batch = Batch(
        size=len(chunk),
        tables={src: SourceColumns(chunk.columns, chunk.text)},
        keys=keys,
        describe=lambda i: (src, location(path, lines[i]), chunk.raw(i)),
        identity=identity,
    )
    return batch, rejected


class Preparer:
    """Validates and encodes records into an `EncodedChunk` plus `Rejected` records."""

    def __init__(self, dataset: DatasetSpec):
        delimiters = {
            s.name: s.options.cell_list_delimiter
            for s in dataset.sources
            if s.options.cell_list_delimiter is not None
        }
        self._validator = Validator(dataset.features, dataset.source_names, delimiters)
        self._features = dataset.features
        self._names = [f.name for f in dataset.features]
        self._types = [f.type for f in dataset.features]
        self._assign = SplitAssigner([fraction for _, fraction in dataset.splits])
        self._keyed = dataset.key is not None
        self._facts = FactCounter(dataset)

    def validate(self, batch: Batch) -> tuple[Valid, list[Rejected]]:
        """(the valid records, the rejected ones)."""
        columns, reasons = self._validator.validate(batch.size, batch.tables)
        rejected = []
        for i, reason in sorted(reasons.items()):
            source, where, raw = batch.describe(i)
            rejected.append(rejection(source, where, reason, raw))
        keys, identity = batch.keys, batch.identity
        if reasons:
            keep = np.ones(batch.size, bool)
            keep[list(reasons)] = False
            if identity is not None:
                identity = (identity[0][keep], identity[1][keep])
            keep = pa.array(keep)
            columns = [c.filter(keep) for c in columns]
            keys = keys.filter(keep) if keys is not None else None
        return Valid(columns, keys, identity), rejected

    def encode(self, valid: Valid) -> EncodedChunk:
        """The valid records encoded, with their splits and order hashes."""
        if not len(valid.columns[0]):
            empty = np.zeros(0, np.uint64)
            payloads = pa.array([], pa.binary())
            return EncodedChunk(empty.astype(np.int16), empty, valid.keys, payloads)
        payloads = encode.encode_columns(self._names, valid.columns)
        if self._keyed:
            assert valid.keys is not None  # the records of a keyed dataset carry their keys
            split_hashes, order_hashes = record_hashes(valid.keys.column("key"))
        else:
            assert valid.identity is not None  # ... and the others their identity's hashes
            split_hashes, order_hashes = valid.identity
        return EncodedChunk(self._assign(split_hashes), order_hashes, valid.keys, payloads)

    def statistics(self, columns: list[pa.Array], splits: np.ndarray) -> DatasetStats:
        """The statistics of valid records (their columns) in their splits."""
        return chunk_stats(self._names, self._types, columns, splits)

    def facts(self, columns: list[pa.Array], splits: np.ndarray) -> FactParts:
        """The facts of valid records (their columns) in their splits (`transforms.facts`)."""
        return self._facts.count(columns, splits)


class _InPlace:
    """An executor that runs each task at once, in the caller's thread."""

    def submit(self, fn, *args) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - the caller gets it from result(), as with a pool
            future.set_exception(e)
        return future

    def shutdown(self) -> None:
        pass


class Encoder:
    """Encodes valid records and counts their statistics on two helper threads, while the
    step's thread validates the next chunk: encoding and statistics are mostly Arrow and numpy,
    which release the GIL, so they use a second core when there is one. With `threads` 0 (local
    worker processes that fill the machine's cores already) the same work is done in turn, in
    the step's thread, with the same output.

    A chunk is encoded while the next one is validated: `push` yields the chunk before the one
    pushed, `flush` the last one. Statistics are counted a few chunks at a time (STATS_ROWS
    records): they do not depend on how records are grouped, and fewer, larger groups spend less
    on the per-call work of numpy and Arrow. At most one chunk waits to be encoded and one group
    to be counted, and the output is that of encoding and counting in turn. After `flush`,
    `stats` holds the statistics of every chunk pushed, and `facts` their facts, but for those
    spilled already: with a `staging` folder, the facts are written to spill files whenever
    they hold `facts_bytes` (`transforms.facts.spill`), and `spilled_facts` names them all.
    """

    STATS_ROWS = 1 << 16

    def __init__(
        self,
        preparer: Preparer,
        threads: int = ENCODE_THREADS,
        staging: str | None = None,
        facts_bytes: int = FACTS_SPILL_BYTES,
    ):
        self._preparer = preparer
        self._pool = ThreadPoolExecutor(max_workers=threads) if threads else _InPlace()
        self._facts_folder = None if staging is None else facts_folder(staging)
        self._facts_bytes = facts_bytes
        self.start()

    def start(self) -> None:
        """Starts a bundle: nothing waits, no statistics."""
        self._encoding: tuple[Future, list[pa.Array]] | None = None
        self._counting: Future | None = None
        self._uncounted: list[tuple[list[pa.Array], np.ndarray]] = []
        self.stats = DatasetStats()
        self.facts = FactParts()
        self._spilled: list[tuple[int, FactsPiece]] = []

    def push(self, valid: Valid) -> Iterator[EncodedChunk]:
        done = self._encoded()
        self._encoding = self._pool.submit(self._preparer.encode, valid), valid.columns
        yield from done

    def flush(self) -> Iterator[EncodedChunk]:
        yield from self._encoded()
        self._count()
        self._merge_counted()

    def close(self) -> None:
        self._pool.shutdown()

    def spilled_facts(self) -> list[tuple[int, FactsPiece]]:
        """After `flush`: the (bucket, piece) pairs of every facts spill file of the bundle,
        the facts not spilled yet written first."""
        self._spill_facts()
        spilled, self._spilled = self._spilled, []
        return spilled

    def _spill_facts(self) -> None:
        if self._facts_folder is None:
            raise ValueError("an Encoder without a staging folder cannot spill its facts")
        if self.facts:
            facts, self.facts = self.facts, FactParts()
            self._spilled.extend(write_facts(facts, self._facts_folder))
            del facts
            # Arrow's allocator keeps what a thread freed for that thread's later use: the
            # counting thread gives back what the spilled facts held (tens of MB at a run's peak)
            pa.default_memory_pool().release_unused()

    def _encoded(self) -> list[EncodedChunk]:
        """The chunk being encoded, once it is (none if it has no record)."""
        if self._encoding is None:
            return []
        (future, columns), self._encoding = self._encoding, None
        encoded = future.result()
        if not len(encoded):
            return []
        self._uncounted.append((columns, encoded.split))
        if sum(len(split) for _, split in self._uncounted) >= self.STATS_ROWS:
            self._count()
        return [encoded]

    def _count(self) -> None:
        """Starts counting the chunks encoded since the last group, once that group is."""
        if not self._uncounted:
            return
        self._merge_counted()
        parts, self._uncounted = self._uncounted, []
        self._counting = self._pool.submit(self._statistics, parts)

    def _merge_counted(self) -> None:
        if self._counting is not None:
            self.stats.merge(self._counting.result())
            self._counting = None

    def _statistics(self, parts: list[tuple[list[pa.Array], np.ndarray]]) -> DatasetStats:
        """The statistics of a group of chunks; their facts merged into `facts` (spilled when
        they reach the budget) here, on the counting thread, the one that touches them while
        a group is counted (counted apart, on the other helper thread, they would keep it from
        encoding: slower)."""
        columns = [pa.concat_arrays([p[0][i] for p in parts]) for i in range(len(parts[0][0]))]
        splits = np.concatenate([split for _, split in parts])
        self.facts.merge(self._preparer.facts(columns, splits))
        if self._facts_folder is not None and self.facts.approx_bytes() >= self._facts_bytes:
            self._spill_facts()
        return self._preparer.statistics(columns, splits)
