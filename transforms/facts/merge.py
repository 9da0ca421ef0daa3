"""The analyze step's Beam steps: the pieces of a bucket, from every worker's spill files,
merged exactly and cut to the cap (`RankBucket`), the buckets merged (`MergeRanked`), both
wired by `AnalyzeFacts`."""

from __future__ import annotations

from typing import Iterable, Iterator

import apache_beam as beam

import transforms.coders  # noqa: F401 - registers the coders of the statistics and facts
from transforms.contract.facts import VOCABULARY_CAP
from transforms.facts.parts import FactParts, RankedFacts
from transforms.facts.spill import FactsPiece, read_facts


def rank_bucket(parts: Iterable[FactParts], cap: int = VOCABULARY_CAP) -> RankedFacts:
    """The facts of one bucket's parts (every part of the bucket), merged exactly, then cut
    to the cap (`FactParts.ranked`)."""
    merged = FactParts()
    for part in parts:
        merged.merge(part)
    return merged.ranked(cap)


class RankBucket(beam.DoFn):
    """(bucket, its pieces) → the bucket's `RankedFacts`, the pieces read one at a time."""

    def __init__(self, cap: int = VOCABULARY_CAP):
        self._cap = cap

    def process(self, element: tuple[int, Iterable[FactsPiece]]) -> Iterator[RankedFacts]:
        _, pieces = element  # one a spill file: a file holds each bucket once
        yield rank_bucket((read_facts(piece) for piece in pieces), self._cap)


class MergeRanked(beam.CombineFn):
    """Merges the ranked facts of every bucket into one."""

    def __init__(self, cap: int = VOCABULARY_CAP):
        self._cap = cap

    def create_accumulator(self) -> RankedFacts:
        return RankedFacts()

    def add_input(self, accumulator: RankedFacts, ranked: RankedFacts) -> RankedFacts:
        return accumulator.merge(ranked, self._cap)

    def merge_accumulators(self, accumulators) -> RankedFacts:
        merged = RankedFacts()
        for accumulator in accumulators:
            merged.merge(accumulator, self._cap)
        return merged

    def extract_output(self, accumulator: RankedFacts) -> RankedFacts:
        return accumulator.compacted(self._cap)


class AnalyzeFacts(beam.PTransform):
    """(bucket, FactsPiece) pairs of every spill → one `RankedFacts` (none without a piece): a
    bucket's pieces merged on one worker and cut, then the buckets merged."""

    def __init__(self, cap: int = VOCABULARY_CAP):
        super().__init__()
        self._cap = cap

    def expand(self, pieces):
        return (
            pieces
            | "GroupBuckets" >> beam.GroupByKey()
            | "RankBuckets" >> beam.ParDo(RankBucket(self._cap))
            | "MergeRanked" >> beam.CombineGlobally(MergeRanked(self._cap)).without_defaults()
        )
