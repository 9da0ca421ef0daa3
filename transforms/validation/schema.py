"""A TFDV `Schema` of the dataset (`schema.pbtxt`), inferred from its config and its statistics.

`infer_schema` follows TFDV's `infer_schema` (SchemaGen), with one difference of principle:
what the config declares is the schema, and the data fills in only what the config leaves open
(string domains, `min_count`), so that the schema does not reject data the ETL accepts beyond
those guesses. Per feature, in config order:

- `type`: INT, FLOAT, or BYTES for strings, bytes and images (the schema has no STRING type);
- `presence`: `min_fraction: 1` and `min_count: 1` for a required feature (but a list of
  variable length, which may be empty), else `min_count: 0`. TFDV requires a value of every
  feature it has seen and sets `min_fraction: 1` for one that happened never to miss; here the
  config's `required: false` wins: a later record without it, or a small split without any,
  is valid;
- the values per record: a feature present in every record with a fixed shape gets `shape`
  with the config's dims (a scalar `shape {}`, as tf.Transform writes a `FixedLenFeature([])`;
  TFDV would infer a dim of 1); any other gets `value_count` with `min: 1` when present in every
  record, else `min: 0` (the shards write a missing value as an empty list), and `max: n` for a
  scalar (1) or an `[n]` shape; a `[null]` shape has no max;
- domains, from the config: a string feature with `values` gets a `string_domain` of those
  values (in config order, named like the feature, referenced by the feature's `domain`); an
  int feature gets an `int_domain` from `min` / `max` (rounded inwards to integers) and from
  `values` (their bounds, `is_categorical: true`; the exact set is the ETL's check); a float
  feature a `float_domain` with `min` / `max` when set, and always `disallow_nan: true` (the
  ETL rejects NaN; infinity is a value); an image an `image_domain {}`; bytes none.
- domains from the data, for strings without `values` only: when the reference split's
  statistics list every distinct value (`counts`, or a `top` that holds them all; none cut
  short) and there are at most `max_string_domain_size` (100 by default, as in TFDV), the
  schema gets a string domain of those values, sorted (as TFDV sorts them). It is a guess to
  review: a later value outside it is reported. No range is inferred from data: TFDV does not
  either, but it does infer a `bool_domain` for ints that are only 0 and 1 and an `int_domain`
  for strings that all parse as integers; both would reject valid unseen data (a 2, an `n/a`),
  so neither is inferred here.

The reference split is `train` (`TRAIN_SPLIT`, as TFX's SchemaGen uses the train split), or the
first split of the statistics when there is no train split, or the one named by `split`.

`schema_text` writes the schema in protobuf text format (fields in field-number order, UTF-8
kept as is: deterministic); `read_schema` reads one back and raises `SchemaError` naming the
file and line of what is wrong.

No Beam and no TensorFlow here.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import cast

from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from transforms.contract.config import TRAIN_SPLIT, DatasetSpec, FeatureSpec
from transforms.contract.manifest import Manifest, ManifestFeature
from transforms.contract.statistics import FeatureStatistics, Statistics

MAX_STRING_DOMAIN_SIZE = 100  # strings: a domain from the data has at most this many (TFDV's)

_TYPES = {
    "int": schema_pb2.INT,
    "float": schema_pb2.FLOAT,
    "string": schema_pb2.BYTES,
    "bytes": schema_pb2.BYTES,
    "image": schema_pb2.BYTES,
}
_PARSE_POSITION = re.compile(r"^\d+:\d+ : ")

Features = (
    Manifest
    | DatasetSpec
    | Mapping[str, ManifestFeature]
    | Mapping[str, FeatureSpec]
    | Sequence[FeatureSpec]
)


class SchemaError(ValueError):
    """A schema file (or text) that does not parse as a Schema, or breaks its own references.
    The message is one line: `WHERE:LINE:COLUMN: what is wrong`, or `WHERE: what is wrong`."""


def infer_schema(
    statistics: Statistics,
    features: Features,
    split: str | None = None,
    max_string_domain_size: int = MAX_STRING_DOMAIN_SIZE,
) -> schema_pb2.Schema:
    """The schema of the features (a Manifest, its `features`, the validated config or its
    FeatureSpecs) given the statistics (statistics.json) of the dataset.

    `split` names the split whose statistics are the reference (default: train, else the
    first); `max_string_domain_size` bounds the string domains inferred from data (0: none)."""
    splits = statistics.splits
    if split is None:
        split = TRAIN_SPLIT if TRAIN_SPLIT in splits else next(iter(splits), None)
    elif split not in splits:
        raise ValueError(f"split {split!r} is not in the statistics ({', '.join(splits)})")
    observed = splits[split].features if split is not None else {}
    schema = schema_pb2.Schema()
    for name, spec in _feature_specs(features).items():
        stats = observed.get(name)
        if stats is not None and stats.type != spec.type:
            raise ValueError(
                f"feature {name!r} is {spec.type} in the config but {stats.type} in the statistics"
            )
        _feature(schema, name, spec, stats, max_string_domain_size)
    return schema


def schema_text(schema: schema_pb2.Schema) -> str:
    """The schema in protobuf text format (schema.pbtxt): the same text for equal schemas."""
    return text_format.MessageToString(schema, as_utf8=True)


def read_schema(source: str | bytes | os.PathLike) -> schema_pb2.Schema:
    """The Schema in a schema.pbtxt file (a path), or in text format (bytes, or a str holding
    `{`, `:` or a line break; an empty str is an empty schema). Raises SchemaError."""
    if isinstance(source, os.PathLike) or (
        isinstance(source, str) and source.strip() and not any(c in source for c in "{:\n")
    ):
        where = os.fspath(source)
        try:
            with open(where, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise SchemaError(f"{where}: {e.strerror or e}") from None
        except UnicodeDecodeError:
            raise SchemaError(f"{where}: not UTF-8 text") from None
    else:
        where = "<schema text>"
        try:
            text = source.decode("utf-8") if isinstance(source, bytes) else source
        except UnicodeDecodeError:
            raise SchemaError(f"{where}: not UTF-8 text") from None
    schema = schema_pb2.Schema()
    try:
        text_format.Parse(text, schema)
    except text_format.ParseError as e:
        message = " ".join(_PARSE_POSITION.sub("", str(e)).split())
        position = f"{e.GetLine()}:{e.GetColumn()}" if e.GetLine() is not None else ""
        raise SchemaError(f"{where}:{position}: {message}" if position else f"{where}: {message}")
    _check_references(schema, where)
    return schema


def _feature_specs(features: Features) -> dict[str, ManifestFeature | FeatureSpec]:
    specs = features.features if isinstance(features, (Manifest, DatasetSpec)) else features
    if isinstance(specs, Mapping):
        return dict(specs)
    return {spec.name: spec for spec in specs}


def _feature(
    schema: schema_pb2.Schema,
    name: str,
    spec: ManifestFeature | FeatureSpec,
    stats: FeatureStatistics | None,
    max_string_domain_size: int,
) -> None:
    out = schema.feature.add(name=name, type=_TYPES[spec.type])
    # An optional feature may hold no value in a split (a small one, say): only a required one
    # must (TFDV would require one value of every feature it has seen); a required list of
    # variable length may be empty.
    variable = spec.shape == (None,)
    always = spec.required and not variable
    out.presence.min_count = 1 if always else 0
    if always:
        out.presence.min_fraction = 1.0
        out.shape.SetInParent()
        for size in spec.shape:
            out.shape.dim.add(size=size)
    else:
        out.value_count.min = 1 if always else 0
        if not variable:
            out.value_count.max = spec.shape[0] if spec.shape else 1

    if spec.type == "int":
        low = math.ceil(spec.min) if spec.min is not None else None
        high = math.floor(spec.max) if spec.max is not None else None
        if spec.values is not None:
            ints = cast("tuple[int, ...]", spec.values)  # an int feature's values are ints
            low = max(min(ints), low) if low is not None else min(ints)
            high = min(max(ints), high) if high is not None else max(ints)
        if low is not None or high is not None:
            if low is not None:
                out.int_domain.min = low
            if high is not None:
                out.int_domain.max = high
            if spec.values is not None:
                out.int_domain.is_categorical = True
    elif spec.type == "float":
        if spec.min is not None:
            out.float_domain.min = spec.min
        if spec.max is not None:
            out.float_domain.max = spec.max
        out.float_domain.disallow_nan = True
    elif spec.type == "image":
        out.image_domain.SetInParent()
    elif spec.type == "string":
        values: Sequence[str | int] | None = spec.values
        if values is None and stats is not None:
            values = _observed_values(stats, max_string_domain_size)
        if values:
            schema.string_domain.add(name=name, value=[str(v) for v in values])
            out.domain = name


def _observed_values(stats: FeatureStatistics, max_size: int) -> list[str] | None:
    """Every distinct value of a string feature, sorted, when the statistics list them all
    (in `counts`, or all among the top values; none cut short) and they are at most
    `max_size`; else None."""
    listed = stats.counts if stats.counts is not None else stats.top
    values = [t.value for t in listed or ()]
    if not stats.distinct_exact or not values or stats.distinct != len(values):
        return None
    if len(values) > max_size:
        return None
    # statistics.json keeps a long value as its start, length and digest: such a value is not
    # the value itself, and the lengths of the values listed show whether one was cut
    sizes = [len(v.encode("utf-8")) for v in values]
    length = stats.length
    if length is None or (min(sizes), max(sizes)) != (length.min, length.max):
        return None
    return sorted(values)


def _check_references(schema: schema_pb2.Schema, where: str) -> None:
    """What TFDV reports as an invalid schema: a feature named twice or not at all, a string
    domain named twice, a `domain` that names no string domain of the schema."""
    domains = [d.name for d in schema.string_domain]
    twice = sorted({d for d in domains if domains.count(d) > 1})
    if twice:
        raise SchemaError(f"{where}: string_domain {twice[0]!r} is defined twice")
    names = [f.name for f in schema.feature]
    if "" in names:
        raise SchemaError(f"{where}: feature {names.index('') + 1} has no name")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SchemaError(f"{where}: feature {twice[0]!r} is defined twice")
    for feature in schema.feature:
        if feature.HasField("domain") and feature.domain not in domains:
            raise SchemaError(
                f"{where}: feature {feature.name!r}: domain {feature.domain!r} names no "
                "string_domain of the schema"
            )


def carry_over(
    current: schema_pb2.Schema, previous: schema_pb2.Schema, features: Features
) -> tuple[schema_pb2.Schema, schema_pb2.Schema]:
    """(checked, published): this run's schema, inferred from its config (`current`), with
    what an earlier run's schema (`previous`, the baseline's) learned from the data.

    Published, for the next run: `current`, but a string feature the config gives no `values`
    takes the previous schema's domain (or none, where it had none) instead of one from this
    run's data, and a feature keeps the previous drift and skew comparators. The config stays
    the schema: a feature made optional, a wider range, a new feature need no other change.

    Checked, for this run: the published schema, plus what the config changed since: a
    feature of the previous schema the config no longer has (`feature_missing`), and the
    previous type of a feature whose type changed (`type_mismatch`). Such a change blocks the
    run that makes it (by default) and no later one: the published schema is the new one.
    """
    specs = _feature_specs(features)
    published = schema_pb2.Schema()
    published.CopyFrom(current)
    before = {f.name: f for f in previous.feature}
    domains = {d.name: d for d in previous.string_domain}
    for feature in published.feature:
        old = before.get(feature.name)
        spec = specs.get(feature.name)
        if old is None or spec is None:
            continue
        if spec.type == "string" and spec.values is None:
            _drop_domain(published, feature)
            if old.HasField("domain") and old.domain in domains:
                published.string_domain.add().CopyFrom(domains[old.domain])
                published.string_domain[-1].name = feature.name
                feature.domain = feature.name
            elif old.HasField("string_domain"):
                feature.string_domain.CopyFrom(old.string_domain)
        for comparator in ("drift_comparator", "skew_comparator"):
            if old.HasField(comparator) and not feature.HasField(comparator):
                getattr(feature, comparator).CopyFrom(getattr(old, comparator))
    # the domains in the order of their features, as `infer_schema` writes them
    order = {f.domain: i for i, f in enumerate(published.feature) if f.HasField("domain")}
    ordered = sorted(published.string_domain, key=lambda d: order.get(d.name, len(order)))
    ordered = [_copy(schema_pb2.StringDomain(), d) for d in ordered]
    del published.string_domain[:]
    published.string_domain.extend(ordered)
    checked = schema_pb2.Schema()
    checked.CopyFrom(published)
    now = {f.name: f for f in checked.feature}
    for name, old in before.items():
        if name not in now:
            checked.feature.add().CopyFrom(old)
            checked.feature[-1].ClearField("domain")  # its values are no longer checked
        elif now[name].type != old.type:
            now[name].type = old.type
    return checked, published


def _copy(into, message):
    into.CopyFrom(message)
    return into


def _drop_domain(schema: schema_pb2.Schema, feature: schema_pb2.Feature) -> None:
    """Removes the string domain a feature refers to (and the reference)."""
    if feature.HasField("domain"):
        kept = [d for d in schema.string_domain if d.name != feature.domain]
        del schema.string_domain[:]
        schema.string_domain.extend(kept)
        feature.ClearField("domain")
    feature.ClearField("string_domain")
