"""manifest.json as typed, frozen dataclasses: the ETL builds a `Manifest`, the trainer reads one.

`Manifest.to_json()` is the file the ETL publishes (keys in a fixed order, indented by two);
`Manifest.from_json()` / `from_dict()` validate a manifest and raise `ManifestError` naming the
field that is wrong (`manifest.json: splits.train.files[0].path: ...`). A manifest the ETL wrote
reads back equal to itself. Paths stay as written: relative to the dataset folder. Older or
hand-written manifests may lack the sections the ETL always writes (`created`, `key`, `combine`,
`compression_level`, ...): they read as None, and are written as null.
No Beam and no TensorFlow here: the trainer's image holds this package.

Longer than most modules because it is the whole manifest.json contract in one place: each part
as a frozen dataclass with its `from_json` check, naming the field that is wrong.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from transforms.contract.config import FEATURE_TYPES, IMAGE_CHANNELS, MATERIALIZE, FeatureSpec
from transforms.contract.layout import (
    COMPRESSIONS,
    DEFAULT_COMPRESSION,
    FORMAT_VERSION,
    MANIFEST,
)
from transforms.ui.errors import ShardflowError


class ManifestError(ShardflowError, ValueError):
    """The dataset has no manifest, or its manifest breaks the contract (a password in the
    message masked, as in every ShardflowError: the readers raise it naming the location)."""


# The most bytes a reader of a dataset reads of each of its small files (manifest.json,
# statistics.json, facts.json): a file beyond them (or one that is no regular file: a FIFO, a
# device) is refused before it is read, so that a damaged or hostile dataset cannot make a
# reader wait or fill its memory. The ETL's are far smaller (a manifest of 100,000 shards is
# about 20 MB).
MANIFEST_MAX_BYTES = 64 << 20
STATISTICS_MAX_BYTES = 256 << 20
FACTS_MAX_BYTES = 1 << 30


def dumps(manifest: Mapping[str, Any]) -> str:
    """The text of a manifest.json holding `manifest` (a decoded manifest, in its key order)."""
    return json.dumps(manifest, indent=2, sort_keys=False) + "\n"


# The fields every shardflow manifest has, with their JSON types; a manifest.json without them
# is someone else's file, and its folder is not ours to replace.
_MANIFEST_FIELDS = {"name": str, "features": dict, "sources": dict, "splits": dict}


def manifest_problem(data: bytes) -> str | None:
    """Why `data` (the bytes of a manifest.json) is not a shardflow manifest (`format_version`
    FORMAT_VERSION and the fields every manifest has); None when it is one. Checks only whose the
    file is, not that it is valid (`Manifest.from_json`): a folder holding a manifest of ours is
    ours to replace, even when that manifest is damaged."""
    try:
        manifest = json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError included
        return "not JSON"
    if not isinstance(manifest, dict):
        return "not a JSON object"
    if "format_version" not in manifest:
        return "no format_version"
    version = manifest["format_version"]
    if type(version) is not int or version != FORMAT_VERSION:  # True == 1, but is no version
        return f"format_version {version!r}, not {FORMAT_VERSION}"
    for name, kind in _MANIFEST_FIELDS.items():
        if not isinstance(manifest.get(name), kind):
            what = "a string" if kind is str else "an object"
            return f"{name} missing or not {what}" if name in manifest else f"no {name}"
    return None


@dataclass(frozen=True)
class ManifestFeature:
    """One feature of the examples: what the trainer builds its parse spec from.

    `default` is the JSON value (a list for a fixed shape with more than one value).
    """

    type: str
    shape: tuple[int | None, ...] = ()
    required: bool = True
    default: Any = None
    values: tuple[str | int, ...] | None = None
    min: float | None = None
    max: float | None = None
    image_size: tuple[int, int, int] | None = None  # an image's height, width, channels

    @classmethod
    def of(cls, spec: FeatureSpec) -> ManifestFeature:
        """The feature of the config as the manifest describes it."""
        default = None
        if spec.default is not None:
            default = _json_value(spec.default[0] if spec.is_scalar else spec.default)
        return cls(
            type=spec.type,
            shape=spec.shape,
            required=spec.required,
            default=default,
            values=spec.values,
            min=spec.min,
            max=spec.max,
            image_size=spec.image_size,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.type,
            "shape": list(self.shape),
            "required": self.required,
        }
        if self.default is not None:
            out["default"] = self.default
        if self.values is not None:
            out["values"] = list(self.values)
        if self.min is not None:
            out["min"] = self.min
        if self.max is not None:
            out["max"] = self.max
        if self.image_size is not None:
            out["image_size"] = list(self.image_size)
        return out

    @classmethod
    def from_dict(cls, raw: Any, where: str, name: str) -> ManifestFeature:
        at = f"features.{name}"
        _check(isinstance(raw, dict), where, at, "must be an object")
        ftype = raw.get("type")
        _check(
            ftype in FEATURE_TYPES,
            where,
            f"{at}.type",
            f"{ftype!r} is not one of {', '.join(FEATURE_TYPES)}",
        )
        shape = raw.get("shape", [])
        _check(
            isinstance(shape, list)
            and (shape == [None] or all(_is_int(d) and d > 0 for d in shape)),
            where,
            f"{at}.shape",
            f"{shape!r} is not [], [n, ...] or [null]",
        )
        required = raw.get("required", True)
        _check(isinstance(required, bool), where, f"{at}.required", "must be true or false")
        values = raw.get("values")
        if values is not None:
            kind = {"string": str, "int": int}.get(ftype)
            _check(
                kind is not None
                and isinstance(values, list)
                and bool(values)
                and all(isinstance(v, kind) and not isinstance(v, bool) for v in values)
                and len(set(values)) == len(values),
                where,
                f"{at}.values",
                "must be a non-empty list of distinct values of a string or int feature",
            )
            values = tuple(values)
        default = raw.get("default")
        if default is not None:
            _check(shape != [None], where, f"{at}.default", "not allowed on a [null] shape")
            _check(
                all(_fits(ftype, v) for v in (default if isinstance(default, list) else [default])),
                where,
                f"{at}.default",
                f"{default!r} is not a value of type {ftype}",
            )
        return cls(
            type=ftype,
            shape=tuple(shape),
            required=required,
            default=default,
            values=values,
            min=raw.get("min"),
            max=raw.get("max"),
            image_size=_image_size(raw.get("image_size"), ftype, where, f"{at}.image_size"),
        )


def _image_size(raw: Any, ftype: str, where: str, at: str) -> tuple[int, int, int] | None:
    if raw is None:
        return None
    _check(
        ftype == "image"
        and isinstance(raw, list)
        and len(raw) == 3
        and all(_is_int(d) and d > 0 for d in raw)
        and raw[2] in IMAGE_CHANNELS,
        where,
        at,
        f"{raw!r} is not [height, width, channels] of an image feature (channels 1, 3 or 4)",
    )
    return tuple(raw)


@dataclass(frozen=True)
class FileEntry:
    """One file of the dataset: `path` relative to the dataset folder, its records (absent for
    files that hold no records, like statistics.json), size and SHA-256."""

    path: str
    records: int | None = None
    bytes: int | None = None
    sha256: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path}
        for key in ("records", "bytes", "sha256"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    @classmethod
    def from_dict(cls, raw: Any, where: str, at: str, records: bool = True) -> FileEntry:
        _check(isinstance(raw, dict), where, at, "must be an object")
        path = raw.get("path")
        _check(
            _relative_path(path),
            where,
            f"{at}.path",
            f"{path!r} is not a path relative to the dataset",
        )
        return cls(
            path=path,
            records=_count(raw.get("records", 0), where, f"{at}.records") if records else None,
            bytes=raw.get("bytes"),
            sha256=raw.get("sha256"),
        )


@dataclass(frozen=True)
class SplitEntry:
    """A split (train, eval, test, ...): its records and its shards, in name order."""

    records: int
    files: tuple[FileEntry, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"records": self.records, "files": [f.to_dict() for f in self.files]}

    @classmethod
    def from_dict(cls, raw: Any, where: str, name: str) -> SplitEntry:
        at = f"splits.{name}"
        _check(isinstance(raw, dict), where, at, "must be an object")
        files = raw.get("files", [])
        _check(isinstance(files, list), where, f"{at}.files", "must be a list")
        return cls(
            records=_count(raw.get("records", 0), where, f"{at}.records"),
            files=_files(files, where, f"{at}.files"),
        )


@dataclass(frozen=True)
class SourceEntry:
    """One source of the dataset: its format, the records read from it and, per field that no
    feature reads, how many records held a value in it."""

    format: str | None
    records: int = 0
    ignored_fields: Mapping[str, int] | None = None
    ignored_fields_unlisted: int | None = None  # ignored fields beyond the listed ones

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": self.format, "records": self.records}
        if self.ignored_fields is not None:
            out["ignored_fields"] = dict(self.ignored_fields)
        if self.ignored_fields_unlisted:
            out["ignored_fields_unlisted"] = self.ignored_fields_unlisted
        return out

    @classmethod
    def from_dict(cls, raw: Any, where: str, name: str) -> SourceEntry:
        at = f"sources.{name}"
        _check(isinstance(raw, dict), where, at, "must be an object")
        ignored = raw.get("ignored_fields")
        _check(
            ignored is None or isinstance(ignored, dict),
            where,
            f"{at}.ignored_fields",
            "must be an object",
        )
        return cls(
            format=raw.get("format"),
            records=_count(raw.get("records", 0), where, f"{at}.records"),
            ignored_fields=None if ignored is None else dict(ignored),
            ignored_fields_unlisted=_count(
                raw.get("ignored_fields_unlisted", 0), where, f"{at}.ignored_fields_unlisted"
            )
            or None,
        )


@dataclass(frozen=True)
class RejectedEntry:
    """The rejected records: how many, per reason, and the file holding them."""

    records: int = 0
    reasons: Mapping[str, int] = field(default_factory=dict)
    files: tuple[FileEntry, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"records": self.records, "reasons": dict(self.reasons)}
        if self.files is not None:
            out["files"] = [f.to_dict() for f in self.files]
        return out

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> RejectedEntry:
        raw = raw or {}
        _check(isinstance(raw, dict), where, "rejected", "must be an object")
        reasons = raw.get("reasons") or {}
        _check(isinstance(reasons, dict), where, "rejected.reasons", "must be an object")
        files = raw.get("files")
        _check(files is None or isinstance(files, list), where, "rejected.files", "must be a list")
        return cls(
            records=_count(raw.get("records", 0), where, "rejected.records"),
            reasons=dict(reasons),
            files=None if files is None else _files(files, where, "rejected.files"),
        )


@dataclass(frozen=True)
class TransformEntry:
    """The tf.Transform output: `path` (relative) and what the split shards hold (`materialize`:
    raw or transformed examples); as the ETL writes it also how the preprocessing was given
    (`module` or `features`), the split analyzed and its records, and the transform's outputs
    described like features (JSON, as written)."""

    path: str
    materialize: str = "raw"
    preprocessing: str | None = None
    analyzed_split: str | None = None
    analyzed_records: int | None = None
    features: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "materialize": self.materialize}
        for key in ("preprocessing", "analyzed_split", "analyzed_records", "features"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> TransformEntry | None:
        if raw is None:
            return None
        _check(isinstance(raw, dict), where, "transform", "must be an object or null")
        path = raw.get("path")
        _check(
            _relative_path(path),
            where,
            "transform.path",
            f"{path!r} is not a path relative to the dataset",
        )
        materialize = raw.get("materialize", "raw")
        _check(
            materialize in MATERIALIZE,
            where,
            "transform.materialize",
            f"{materialize!r} is not one of {', '.join(MATERIALIZE)}",
        )
        records = raw.get("analyzed_records")
        if records is not None:
            _count(records, where, "transform.analyzed_records")
        return cls(
            path=path,
            materialize=materialize,
            preprocessing=raw.get("preprocessing"),
            analyzed_split=raw.get("analyzed_split"),
            analyzed_records=records,
            features=raw.get("features"),
        )


SCHEMA_FROM = ("config", "baseline", "inferred")


@dataclass(frozen=True)
class ValidationEntry:
    """The data validation of a run: the schema checked against (schema.pbtxt; `schema_from`
    says whose it is: the config's `validation.schema`, the baseline's, or inferred from this
    run), the statistics in TFDV's format (statistics.pb), the baseline dataset compared with
    for drift, and the anomalies found (`transforms.validation.anomalies.Anomaly.to_dict()`,
    none of them blocking: a blocking one fails the run)."""

    schema: FileEntry
    statistics: FileEntry
    schema_from: str = "inferred"
    baseline: str | None = None
    anomalies: tuple[Mapping[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema.to_dict(),
            "schema_from": self.schema_from,
            "statistics": self.statistics.to_dict(),
            "baseline": self.baseline,
            "anomalies": [dict(a) for a in self.anomalies],
        }

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> ValidationEntry | None:
        if raw is None:
            return None
        _check(isinstance(raw, dict), where, "validation", "must be an object")
        schema_from = raw.get("schema_from", "inferred")
        _check(
            schema_from in SCHEMA_FROM,
            where,
            "validation.schema_from",
            f"{schema_from!r} is not one of {', '.join(SCHEMA_FROM)}",
        )
        anomalies = raw.get("anomalies") or []
        _check(
            isinstance(anomalies, list) and all(isinstance(a, dict) for a in anomalies),
            where,
            "validation.anomalies",
            "must be a list of objects",
        )
        return cls(
            schema=FileEntry.from_dict(raw.get("schema"), where, "validation.schema", False),
            statistics=FileEntry.from_dict(
                raw.get("statistics"), where, "validation.statistics", False
            ),
            schema_from=schema_from,
            baseline=raw.get("baseline"),
            anomalies=tuple(anomalies),
        )


@dataclass(frozen=True)
class Manifest:
    """A dataset's manifest.json. The sections after `transform` are written only when set:
    `joined` (records joined into others, with `combine: join`), `date` (of a date-templated
    config), `statistics` (the statistics.json file), `limit` (a partial dataset: at most
    this many records were read from each source, `shardflow etl --limit`), `validation`
    (the schema, statistics.pb and anomalies of data validation) and `facts` (the facts.json
    file: `transforms.contract.facts`)."""

    name: str
    features: Mapping[str, ManifestFeature]
    splits: Mapping[str, SplitEntry]
    sources: Mapping[str, SourceEntry] = field(default_factory=dict)
    compression: str = DEFAULT_COMPRESSION
    compression_level: int | None = None
    label: str | None = None
    key: str | None = None
    combine: str | None = None
    created: str | None = None
    config_sha256: str | None = None
    rejected: RejectedEntry = field(default_factory=RejectedEntry)
    duplicates: int = 0
    transform: TransformEntry | None = None
    joined: int | None = None
    date: str | None = None
    statistics: FileEntry | None = None
    limit: int | None = None
    validation: ValidationEntry | None = None
    facts: FileEntry | None = None
    format_version: int = FORMAT_VERSION

    def with_statistics(self, entry: FileEntry) -> Manifest:
        return replace(self, statistics=entry)

    def with_facts(self, entry: FileEntry) -> Manifest:
        return replace(self, facts=entry)

    def with_validation(self, entry: ValidationEntry) -> Manifest:
        return replace(self, validation=entry)

    def to_dict(self) -> dict[str, Any]:
        """The decoded JSON of the manifest, keys in the order of the file."""
        out: dict[str, Any] = {
            "format_version": self.format_version,
            "name": self.name,
            "created": self.created,
            "config_sha256": self.config_sha256,
            "compression": self.compression,
            "compression_level": self.compression_level,
            "features": {n: f.to_dict() for n, f in self.features.items()},
            "label": self.label,
            "key": self.key,
            "combine": self.combine,
            "sources": {n: s.to_dict() for n, s in self.sources.items()},
            "splits": {n: s.to_dict() for n, s in self.splits.items()},
            "rejected": self.rejected.to_dict(),
            "duplicates": self.duplicates,
            "transform": None if self.transform is None else self.transform.to_dict(),
        }
        if self.joined is not None:
            out["joined"] = self.joined
        if self.date is not None:
            out["date"] = self.date
        if self.statistics is not None:
            out["statistics"] = self.statistics.to_dict()
        if self.facts is not None:
            out["facts"] = self.facts.to_dict()
        if self.limit is not None:
            out["limit"] = self.limit
        if self.validation is not None:
            out["validation"] = self.validation.to_dict()
        return out

    def to_json(self) -> str:
        """The text of manifest.json."""
        return dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str | bytes, where: str = MANIFEST) -> Manifest:
        """Reads and validates the text of a manifest.json; `where` names it in errors."""
        try:
            raw = json.loads(text.decode("utf-8") if isinstance(text, bytes) else text)
        except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
            raise ManifestError(f"{where}: not valid JSON: {e}") from None
        return cls.from_dict(raw, where)

    @classmethod
    def from_dict(cls, raw: Any, where: str = MANIFEST) -> Manifest:
        """Validates the decoded JSON of a manifest."""
        _check(isinstance(raw, dict), where, "", "must be a JSON object")
        version = raw.get("format_version")
        _check(
            version == FORMAT_VERSION,
            where,
            "format_version",
            f"{version!r} is not supported (this trainer reads {FORMAT_VERSION})",
        )
        name = raw.get("name")
        _check(isinstance(name, str) and bool(name), where, "name", "must be a non-empty string")
        compression = raw.get("compression", DEFAULT_COMPRESSION)
        _check(
            compression in COMPRESSIONS,
            where,
            "compression",
            f"{compression!r} is not one of {', '.join(COMPRESSIONS)}",
        )
        raw_features = raw.get("features")
        _check(
            isinstance(raw_features, dict) and bool(raw_features),
            where,
            "features",
            "must be a non-empty object",
        )
        features = {n: ManifestFeature.from_dict(f, where, n) for n, f in raw_features.items()}
        label = raw.get("label")
        _check(
            label is None or label in features,
            where,
            "label",
            f"{label!r} is not one of the features",
        )
        raw_splits = raw.get("splits")
        _check(isinstance(raw_splits, dict), where, "splits", "must be an object")
        splits = {n: SplitEntry.from_dict(s, where, n) for n, s in raw_splits.items()}
        _check_shards_once(splits, where)
        raw_sources = raw.get("sources") or {}
        _check(isinstance(raw_sources, dict), where, "sources", "must be an object")
        sources = {n: SourceEntry.from_dict(s, where, n) for n, s in raw_sources.items()}
        rejected = RejectedEntry.from_dict(raw.get("rejected"), where)
        joined = raw.get("joined")
        statistics = raw.get("statistics")
        facts = raw.get("facts")
        limit = raw.get("limit")
        _check(
            limit is None or (type(limit) is int and limit > 0),
            where,
            "limit",
            f"{limit!r} must be a positive integer",
        )
        return cls(
            format_version=version,
            name=name,
            created=raw.get("created"),
            config_sha256=raw.get("config_sha256"),
            compression=compression,
            compression_level=raw.get("compression_level"),
            features=features,
            label=label,
            key=raw.get("key"),
            combine=raw.get("combine"),
            sources=sources,
            splits=splits,
            rejected=rejected,
            duplicates=_count(raw.get("duplicates", 0), where, "duplicates"),
            transform=TransformEntry.from_dict(raw.get("transform"), where),
            joined=None if joined is None else _count(joined, where, "joined"),
            date=raw.get("date"),
            statistics=None
            if statistics is None
            else FileEntry.from_dict(statistics, where, "statistics", records=False),
            limit=limit,
            validation=ValidationEntry.from_dict(raw.get("validation"), where),
            facts=None if facts is None else FileEntry.from_dict(facts, where, "facts", False),
        )


def _check_shards_once(splits: Mapping[str, SplitEntry], where: str) -> None:
    """ManifestError naming the first shard listed twice, in one split or in two: its records
    would be trained on twice, or a model scored on records it trained on."""
    seen: dict[str, str] = {}
    for name, split in splits.items():
        for i, entry in enumerate(split.files):
            at = f"splits.{name}.files[{i}]"
            path = posixpath.normpath(entry.path)
            first = seen.setdefault(path, at)
            if first != at:
                _check(
                    False,
                    where,
                    f"{at}.path",
                    f"{entry.path!r} is also {first}: a shard listed twice would be "
                    + (
                        "read twice in an epoch"
                        if first.startswith(f"splits.{name}.")
                        else "in two splits (a model scored on records it trained on)"
                    )
                    + "; the manifest was edited after the ETL wrote it: rerun the ETL",
                )


def _files(raw: list, where: str, at: str) -> tuple[FileEntry, ...]:
    return tuple(FileEntry.from_dict(f, where, f"{at}[{i}]") for i, f in enumerate(raw))


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    return value


def _check(ok: bool, where: str, at: str, problem: str) -> None:
    if not ok:
        raise ManifestError(f"{where}: {at}: {problem}" if at else f"{where}: {problem}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(value: Any, where: str, at: str) -> int:
    _check(_is_int(value) and value >= 0, where, at, f"{value!r} is not a non-negative integer")
    return value


def _fits(ftype: str, value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if ftype == "int":
        return isinstance(value, int)
    if ftype == "float":
        return isinstance(value, (int, float))
    return isinstance(value, str)


def _relative_path(path: Any) -> bool:
    return (
        isinstance(path, str)
        and bool(path)
        and not path.startswith("/")
        and "://" not in path
        and ".." not in path.split("/")
    )
