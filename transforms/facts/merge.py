"""The analyze step's Beam combines: a bucket's parts merged exactly and ranked
(`MergeFactParts`), the buckets merged (`MergeRanked`), both wired by `AnalyzeFacts`."""

from __future__ import annotations

import apache_beam as beam

from transforms.contract.facts import VOCABULARY_CAP
from transforms.facts.parts import FactParts, RankedFacts


class MergeFactParts(beam.CombineFn):
    """Merges the parts of one bucket, exactly, then ranks and cuts them (`FactParts.ranked`)."""

    def __init__(self, cap: int = VOCABULARY_CAP):
        self._cap = cap

    def create_accumulator(self) -> FactParts:
        return FactParts()

    def add_input(self, accumulator: FactParts, part: FactParts) -> FactParts:
        return accumulator.merge(part)

    def merge_accumulators(self, accumulators) -> FactParts:
        merged = FactParts()
        for accumulator in accumulators:
            merged.merge(accumulator)
        return merged

    def extract_output(self, accumulator: FactParts) -> RankedFacts:
        return accumulator.ranked(self._cap)


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
        return accumulator


class AnalyzeFacts(beam.PTransform):
    """(bucket, FactParts) pairs of every bundle → one `RankedFacts`: merged per bucket, ranked,
    then merged across buckets."""

    def __init__(self, cap: int = VOCABULARY_CAP):
        super().__init__()
        self._cap = cap

    def expand(self, parts):
        return (
            parts
            | "MergeBuckets" >> beam.CombinePerKey(MergeFactParts(self._cap))
            | "DropBuckets" >> beam.Values()
            | "MergeRanked" >> beam.CombineGlobally(MergeRanked(self._cap))
        )
