"""The Beam coder of the ETL's elements: chunks are pickled, their size estimated without it.

Kept apart from the element classes (`transforms.records`, `transforms.stats`,
`transforms.facts`), which import no Beam, so that checking a config and preparing records
outside a pipeline (`shardflow predict`, `init`) cost no Beam import. Every module that puts
such elements in a PCollection imports this one, which registers the coders of chunks,
statistics and facts; the Beam modules of the sink's own elements register theirs with
`ChunkCoder`.
"""

from __future__ import annotations

import pickle
from typing import Any

from apache_beam import coders

from transforms.facts.parts import FactParts, RankedFacts
from transforms.facts.spill import FactsPiece
from transforms.records import EncodedChunk, RawChunk
from transforms.stats import DatasetStats


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


coders.registry.register_coder(RawChunk, ChunkCoder)
coders.registry.register_coder(EncodedChunk, ChunkCoder)
for element in (DatasetStats, FactParts, RankedFacts, FactsPiece):
    coders.registry.register_coder(element, ChunkCoder)
