"""statistics.json as TensorFlow Data Validation's `DatasetFeatureStatisticsList` (`statistics.pb`).

`to_proto` converts the statistics that `transforms.stats` writes (statistics.json, as
`transforms.contract.statistics.Statistics`) into the proto that TFDV
(`tfdv.load_stats_binary`, then `tfdv.visualize_statistics`, `tfdv.infer_schema`,
`tfdv.validate_statistics`) and Facets read; `serialize` gives its bytes, deterministic, so that
a rerun writes the same file. (`tfdv.load_statistics` reads a one-record TFRecord file or text
format, not this plain binary file.) It fills what TFDV's statistics generators fill, the way
they fill it:

- one `DatasetFeatureStatistics` per split, in the statistics' split order (name order in a
  statistics.json read back: it is written with sorted keys): `name` the split, `num_examples`
  its records; its features sorted by name, each named by `path` (one step);
- `type`: INT, FLOAT, STRING, or BYTES for bytes and images; an image also gets TFDV's custom
  statistic `domain_info: "image_domain {}"`, from which `tfdv.infer_schema` makes an image
  domain;
- `common_stats`: `num_non_missing`, `num_missing`, `tot_num_values` (the values), and
  `avg_num_values` (values per record with a value);
- numbers: `mean`, `std_dev`, `min`, `max`, and the histogram as one STANDARD `Histogram`
  (buckets `low_value`, `high_value`, `sample_count`);
- strings: `unique`, `top_values` (the top 20, as TFDV's default) and a `rank_histogram` (rank
  i from 0, `low_rank` = `high_rank` = i, `label` the value, as TFDV's top-k generator writes
  them) of every value while statistics.json lists all their counts (`counts`: at most 1,000
  distinct values, TFDV's number of rank buckets too), else of the top values; `avg_length`;
- bytes and images: `min_num_bytes`, `max_num_bytes`, `avg_num_bytes`.

Where these statistics differ from TFDV's own:

- A record without a value (an empty list) is *missing*, as statistics.json counts it; TFDV
  reading the shards would count such a record present, with no value, because the shards hold
  every feature in every record.
- `min_num_values` and `max_num_values` are set only where they are known: 1 when every record
  with a value holds one (values = records with a value), `n` for a feature of shape `[n]`
  (from the manifest) whose records with a value hold `n` each; a `[null]` feature leaves them
  unset (0): statistics.json does not keep the value count of each record. For the same reason
  there is no `num_values_histogram`.
- No `median`, no `num_zeros` (left 0), no QUANTILES histogram: statistics.json has none.
- The histogram has equal-width bars while a feature has at most 1,000 distinct values (one bar
  per value for a few integers); beyond, its bars are of `asinh(x)` buckets (about 12% of a
  value wide), not of equal width, though typed STANDARD: each bar's bounds are exact.
  Infinite values (valid data) are in no bar and in no mean or standard deviation, as in
  statistics.json; NaN is rejected by the ETL, so `num_nan` is 0.
- Above 10,000 distinct values of a string in a split, `unique` is an estimate (about 1% off)
  and `top_values` / `rank_histogram` are the most frequent values of a uniform sample of its
  distinct values, with exact counts (statistics.json says `distinct_exact: false`). Above
  1,000 distinct values, the rank histogram holds the top 20 only (TFDV's up to 1,000). Values
  longer than 200 bytes appear as statistics.json keeps them (their start, length and digest).
- Bytes and images have no `unique` (left 0): their values are not counted.
- `avg_num_values`, `avg_length` and the byte sizes are float32 fields of the proto.

No Beam and no TensorFlow here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from tensorflow_metadata.proto.v0 import statistics_pb2

from transforms.contract.layout import STATISTICS_FORMAT_VERSION
from transforms.contract.manifest import Manifest, ManifestFeature
from transforms.contract.statistics import FeatureStatistics, Statistics

_TYPES = {
    "int": statistics_pb2.FeatureNameStatistics.INT,
    "float": statistics_pb2.FeatureNameStatistics.FLOAT,
    "string": statistics_pb2.FeatureNameStatistics.STRING,
    "bytes": statistics_pb2.FeatureNameStatistics.BYTES,
    "image": statistics_pb2.FeatureNameStatistics.BYTES,
}
# TFDV's image statistics generator marks an image feature with this custom statistic; its
# schema inference turns it into `image_domain {}`.
_DOMAIN_INFO = "domain_info"
_IMAGE_DOMAIN = "image_domain {}"


def to_proto(
    statistics: Statistics,
    manifest: Manifest | Mapping[str, ManifestFeature] | None = None,
) -> statistics_pb2.DatasetFeatureStatisticsList:
    """The statistics (statistics.json) as a DatasetFeatureStatisticsList: one dataset per
    split, in the statistics' order. `manifest` (or its `features`) gives the features' shapes
    (value counts of `[n]` features); without it, only what the statistics show is filled in."""
    version = statistics.format_version
    if version != STATISTICS_FORMAT_VERSION:
        raise ValueError(
            f"statistics format_version {version!r} is not {STATISTICS_FORMAT_VERSION}"
        )
    features = (manifest.features if isinstance(manifest, Manifest) else manifest) or {}
    out = statistics_pb2.DatasetFeatureStatisticsList()
    for split, body in statistics.splits.items():
        dataset = out.datasets.add(name=split, num_examples=body.records)
        for name in sorted(body.features):
            _feature(dataset.features.add(), name, body.features[name], features.get(name))
    return out


def serialize(proto: statistics_pb2.DatasetFeatureStatisticsList) -> bytes:
    """The bytes of statistics.pb, serialized deterministically: equal protos, equal bytes."""
    return proto.SerializeToString(deterministic=True)


def write(path: str | os.PathLike, proto: statistics_pb2.DatasetFeatureStatisticsList) -> bytes:
    """Writes the proto to a local file (`statistics.pb`); returns the bytes written."""
    data = serialize(proto)
    with open(path, "wb") as f:
        f.write(data)
    return data


def _feature(
    out: statistics_pb2.FeatureNameStatistics,
    name: str,
    stats: FeatureStatistics,
    feature: ManifestFeature | None,
) -> None:
    kind = stats.type
    if kind not in _TYPES:
        raise ValueError(f"feature {name!r}: unknown type {kind!r}")
    out.path.step.append(name)
    out.type = _TYPES[kind]
    if kind in ("int", "float"):
        num = out.num_stats
        _common(num.common_stats, stats, feature)
        for key, field in (("mean", "mean"), ("std", "std_dev"), ("min", "min"), ("max", "max")):
            value = getattr(stats, key)
            if value is not None:
                setattr(num, field, value)
        if stats.histogram:
            histogram = num.histograms.add(type=statistics_pb2.Histogram.STANDARD)
            for bar in stats.histogram:
                histogram.buckets.add(
                    low_value=bar.low, high_value=bar.high, sample_count=bar.count
                )
    elif kind == "string":
        text = out.string_stats
        _common(text.common_stats, stats, feature)
        text.unique = stats.distinct
        top = stats.top or ()
        for entry in top:
            text.top_values.add(value=entry.value, frequency=entry.count)
        ranked = stats.counts if stats.counts is not None else top
        for rank, entry in enumerate(ranked):
            text.rank_histogram.buckets.add(
                low_rank=rank, high_rank=rank, label=entry.value, sample_count=entry.count
            )
        if stats.length is not None and stats.length.mean is not None:
            text.avg_length = stats.length.mean
    else:
        blob = out.bytes_stats
        _common(blob.common_stats, stats, feature)
        size = stats.size
        if size is not None and size.min is not None:
            blob.min_num_bytes = size.min
            blob.max_num_bytes = size.max
            blob.avg_num_bytes = size.mean
        if kind == "image":
            out.custom_stats.add(name=_DOMAIN_INFO, str=_IMAGE_DOMAIN)


def _common(
    out: statistics_pb2.CommonStatistics,
    stats: FeatureStatistics,
    feature: ManifestFeature | None,
) -> None:
    present = stats.records - stats.missing
    values = stats.values
    out.num_non_missing = present
    out.num_missing = stats.missing
    out.tot_num_values = values
    if not present:
        return
    out.avg_num_values = values / present
    per_record = None
    if values == present:  # every record with a value holds one: exactly one each
        per_record = 1
    elif feature is not None and len(feature.shape) == 1 and feature.shape[0] is not None:
        if values == feature.shape[0] * present:
            per_record = feature.shape[0]
    if per_record is not None:
        out.min_num_values = out.max_num_values = per_record
