"""The source formats: each one's options checker and reader, found by name.

Each format lives in its own module `transforms/sources/<format>.py`. A file format has two
functions:

  `options(raw: dict) -> <Format>Options`
                                 checks the source's `options` mapping and returns it complete
                                 (defaults filled in) as the format's frozen dataclass, a
                                 `SourceOptions`; raises `OptionError(option, message)`.
  `parse(stream, path, source, chunk_rows=CHUNK_ROWS)`
                                 yields `RawChunk`s and rejected-record dicts for one file.
Optionally `resolve_paths(options, base_dir)` resolves files named in options (not `path`)
against the config's folder.

A query format (sql, bigquery) has `options` and `Read(source)` instead of `parse`.
Modules are imported on first use, so checking a config costs no format's libraries.
`OptionsReader` gives the checkers one way to read and check options.
"""

from __future__ import annotations

import codecs
import importlib
import importlib.util
from typing import Any, Callable, Iterable

from transforms.contract.config import SOURCE_FORMATS, OptionError, SourceOptions
from transforms.ui.suggest import did_you_mean

# The formats with a module here (every name of the contract has a module of the same name).
IMPLEMENTED = tuple(
    fmt
    for fmt in SOURCE_FORMATS
    if importlib.util.find_spec(f"transforms.sources.{fmt}") is not None
)
# Formats not read from files: their module has `Read(source)`, a PTransform applied to the
# pipeline that returns (chunks, rejected, counts) like `transforms.sources.read.ReadSource`.
QUERY_FORMATS = ("sql", "bigquery")


# File name endings → the formats that read such files, the likelier first: what `shardflow
# init` proposes for a file, and which source of a config `predict --input` reads it with. A
# `.txt` file is delimited text when `init` finds a delimiter in it, else one record per line.
EXTENSIONS: dict[str, tuple[str, ...]] = {
    ".csv": ("csv",), ".tsv": ("csv",), ".tab": ("csv",), ".txt": ("csv", "text"),
    ".jsonl": ("jsonl",), ".ndjson": ("jsonl",), ".json": ("jsonl",),
    ".parquet": ("parquet",), ".pq": ("parquet",),
    ".avro": ("avro",),
    ".tfrecord": ("tfrecord",), ".tfrecords": ("tfrecord",), ".tfrec": ("tfrecord",),
    ".bin": ("binary",),
    ".bmp": ("images",), ".gif": ("images",), ".jpeg": ("images",), ".jpg": ("images",),
    ".png": ("images",), ".webp": ("images",),
}  # fmt: skip
# Compressed files are read by their name's last ending (`transforms.files.open_file`); `.zz` is
# shardflow's zlib ending for TFRecord shards.
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".zz", ".deflate", ".zst", ".xz", ".lzma")


def split_suffix(path: str) -> tuple[str, str, str]:
    """(stem, format ending, compression ending) of a file name, the endings lower-cased:
    `a/b.Tfrecord.GZ` → (`b`, `.tfrecord`, `.gz`)."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    stem, compression = name, ""
    lower = name.lower()
    for ending in COMPRESSED_SUFFIXES:
        if lower.endswith(ending) and len(name) > len(ending):
            stem, compression = name[: -len(ending)], ending
            break
    dot = stem.rfind(".")
    if dot <= 0:
        return stem, "", compression
    return stem[:dot], stem[dot:].lower(), compression


def formats_of_name(path: str) -> tuple[str, ...]:
    """The formats that read a file of this name, the likelier first; () when its name tells
    none."""
    return EXTENSIONS.get(split_suffix(path)[1], ())


def check_options(fmt: str, raw: dict[str, Any]) -> SourceOptions:
    """The `fmt` format's options of the mapping `raw`, checked, with their defaults."""
    options: SourceOptions = _module(fmt).options(raw)
    return options


def resolve_paths(fmt: str, options: SourceOptions, base_dir: str) -> SourceOptions:
    """The options with the local files they name resolved against the config's folder."""
    resolve = getattr(_module(fmt), "resolve_paths", None)
    return resolve(options, base_dir) if resolve is not None else options


def parser(fmt: str) -> Callable:
    return _module(fmt).parse


def reader(fmt: str) -> Callable:
    return _module(fmt).Read


def _module(fmt: str):
    return importlib.import_module(f"transforms.sources.{fmt}")


_MISSING = object()


class OptionsReader:
    """Reads one source's options: typed getters with defaults; `done()` rejects unknown keys."""

    def __init__(self, raw: dict[str, Any]):
        self._raw = dict(raw)
        self._seen: set[str] = set()

    def get(self, name: str, default: Any = _MISSING) -> Any:
        self._seen.add(name)
        if name in self._raw:
            return self._raw[name]
        if default is _MISSING:
            raise OptionError(name, "is required")
        return default

    def has(self, name: str) -> bool:
        return name in self._raw

    def string(self, name: str, default: Any = _MISSING, *, empty: bool = False) -> Any:
        value = self.get(name, default)
        if value is default and default is None:
            return None
        if not isinstance(value, str) or (not empty and not value):
            raise OptionError(
                name, "must be a non-empty string" if not empty else "must be a string"
            )
        return value

    def boolean(self, name: str, default: Any = _MISSING) -> bool:
        value = self.get(name, default)
        if not isinstance(value, bool):
            raise OptionError(name, "must be true or false")
        return value

    def integer(
        self, name: str, default: Any = _MISSING, *, minimum: int | None = None,
        maximum: int | None = None,
    ) -> Any:  # fmt: skip
        value = self.get(name, default)
        if value is default and default is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise OptionError(name, "must be an integer")
        if minimum is not None and value < minimum:
            raise OptionError(name, f"must be at least {minimum}")
        if maximum is not None and value > maximum:
            raise OptionError(name, f"must be at most {maximum}")
        return value

    def strings(self, name: str, default: Any = _MISSING) -> Any:
        value = self.get(name, default)
        if value is default and default is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise OptionError(name, "must be a list of strings")
        return list(value)

    def choice(self, name: str, choices: Iterable[str], default: Any = _MISSING) -> Any:
        value = self.get(name, default)
        choices = tuple(choices)
        if value not in choices:
            hint = did_you_mean(value, choices) if isinstance(value, str) else ""
            raise OptionError(name, f"{value!r} is not one of {', '.join(map(str, choices))}{hint}")
        return value

    def encoding(self, name: str = "encoding", default: str = "utf-8") -> str:
        value = self.get(name, default)
        try:
            codec = codecs.lookup(value)
        except (LookupError, TypeError):
            raise OptionError(name, f"unknown encoding {value!r}") from None
        if not codec._is_text_encoding:  # rot13, base64, zlib: codecs, but not of text
            raise OptionError(name, f"{value!r} is not a text encoding")
        return codec.name

    def done(self) -> None:
        unknown = sorted(set(self._raw) - self._seen)
        if unknown:
            allowed = sorted(self._seen)
            raise OptionError(
                unknown[0],
                f"unknown key (allowed: {', '.join(allowed)}){did_you_mean(unknown[0], allowed)}",
            )
