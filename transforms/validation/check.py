"""The data validation of one dataset: its statistics checked against a schema, a baseline and
its own train split, as a run does it before publishing and `shardflow validate` does it
afterwards.

The schema is the config's curated one (`validation.schema`), else this dataset's config with
what the baseline's schema learned from the data (`schema.carry_over`: its string domains carry
on from run to run, as with TFX's SchemaGen and ExampleValidator), else one inferred from this
dataset. `validate` returns what a dataset
publishes: the schema, the statistics in TFDV's format and the anomalies, sorted: the run's own
(`rejected_rate`, from the manifest's counts) first, then those of the features.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

from transforms.contract.config import ValidationSpec
from transforms.contract.layout import MANIFEST, SCHEMA, STATISTICS
from transforms.contract.manifest import Manifest
from transforms.contract.statistics import Statistics
from transforms.validation import statistics_proto
from transforms.validation.anomalies import (
    Anomaly,
    FeatureThresholds,
    Thresholds,
    find_anomalies,
    rejected_anomaly,
)
from transforms.validation.schema import carry_over, infer_schema, read_schema, schema_text


@dataclasses.dataclass(frozen=True)
class Baseline:
    """A dataset compared with: where it is, its statistics.json and its schema.pbtxt (None
    when it has none)."""

    uri: str
    statistics: Statistics
    schema: str | None = None


@dataclasses.dataclass(frozen=True)
class Validated:
    schema_text: str
    schema_from: str  # config | baseline | dataset | inferred
    statistics_proto: bytes  # statistics.pb
    anomalies: tuple[Anomaly, ...]

    @property
    def blocking(self) -> tuple[Anomaly, ...]:
        return tuple(a for a in self.anomalies if a.blocking)


def thresholds(spec: ValidationSpec) -> Thresholds:
    """The `Thresholds` of a config's `validation:` section."""
    return Thresholds(
        **dict(spec.limits),
        features={name: FeatureThresholds(**dict(limits)) for name, limits in spec.features},
        blocking=frozenset(spec.block),
    )


def validate(
    spec: ValidationSpec,
    manifest: Manifest,
    statistics: Statistics,
    baseline: Baseline | None = None,
    own_schema: str | None = None,
) -> Validated:
    """The schema, statistics.pb and anomalies of a dataset (its manifest and statistics.json).
    `own_schema`: the dataset's published schema, checked against when there is neither a
    curated schema nor a baseline's (`shardflow validate`); else one is inferred."""
    if spec.schema_text is not None:
        schema, whose = read_schema(spec.schema_text.encode("utf-8")), "config"
        published = schema
    elif baseline is not None and baseline.schema is not None:
        previous = read_schema(baseline.schema.encode("utf-8"))
        schema, published = carry_over(infer_schema(statistics, manifest), previous, manifest)
        whose = "baseline"
    elif own_schema is not None:
        schema, whose = read_schema(own_schema.encode("utf-8")), "dataset"
        published = schema
    else:
        schema, whose = infer_schema(statistics, manifest), "inferred"
        published = schema
    limits = thresholds(spec)
    anomalies = find_anomalies(
        statistics, schema, limits, baseline.statistics if baseline is not None else None
    )
    read = sum(s.records for s in manifest.sources.values())
    rejected = rejected_anomaly(read, manifest.rejected.reasons, limits)
    if rejected is not None:  # of no feature: before those of features
        anomalies.insert(0, rejected)
    proto = statistics_proto.serialize(statistics_proto.to_proto(statistics, manifest))
    return Validated(schema_text(published), whose, proto, tuple(anomalies))


def describe(anomaly: Anomaly | Mapping[str, Any]) -> str:
    """One line: `FEATURE (SPLIT): KIND: MEASURE VALUE (threshold THRESHOLD): DESCRIPTION`
    (without `FEATURE (SPLIT): ` for an anomaly of no feature, `rejected_rate`)."""
    a = anomaly.to_dict() if isinstance(anomaly, Anomaly) else anomaly
    measure = ""
    if a.get("measure") and isinstance(a.get("value"), (int, float)):
        measure = f"{a['measure']} {_number(a['value'])}"
        if isinstance(a.get("threshold"), (int, float)):
            measure += f" (threshold {_number(a['threshold'])})"
        measure += ": "
    where = f"{a['feature']} ({a['split']}): " if a.get("feature") else ""
    return f"{where}{a['kind']}: {measure}{a['description']}"


def _number(value: float) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def read_dataset(read: Any, uri: str) -> tuple[Manifest, Statistics, str | None]:
    """A dataset's manifest, statistics.json and schema.pbtxt (None when it has none);
    `read(path) -> bytes | None` reads a file (None: it does not exist). ValueError naming the
    file when the dataset is not there, has no statistics, or statistics that are not JSON or
    break their contract (`StatisticsError`)."""
    uri = uri.rstrip("/")
    data = read(f"{uri}/{MANIFEST}")
    if data is None:
        raise ValueError(f"{uri}: no {MANIFEST}: not a dataset (or not complete)")
    manifest = Manifest.from_json(data, where=f"{uri}/{MANIFEST}")
    stats = read(f"{uri}/{STATISTICS}")
    if stats is None:
        raise ValueError(f"{uri}: no {STATISTICS}: nothing to compare with")
    where = f"{uri}/{STATISTICS}"
    try:
        raw = json.loads(stats)
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{where}: not valid JSON: {e}") from None
    statistics = Statistics.from_json(raw, where)
    schema = read(f"{uri}/{SCHEMA}")
    return manifest, statistics, None if schema is None else schema.decode("utf-8")
