"""The source formats: each one's descriptor, found by name.

Each format lives in its own module `transforms/sources/<format>.py`, which declares what
shardflow knows of it once, as `FORMAT = Format(...)`: its name and kind, the file name endings
it reads (the likelier format first where two share one), the compression endings its files may
carry, whether a large file is read in byte ranges, its options type and checker, and its reader.
A file format's reader is
  `parse(stream, path, source, chunk_rows=CHUNK_ROWS)`
                                 yields `RawChunk`s and rejected records for one file;
a query format's (sql, bigquery) is named as `module:name` (`transforms.sources.queries`,
imported by `reader` when a pipeline is built): `Read(source)`, a PTransform applied to the
pipeline that returns (chunks, rejected, counts) like `transforms.sources.read.ReadSource`.
The options checker `options(raw: dict) -> <Format>Options` checks the source's `options`
mapping and returns it complete (defaults filled in) as the format's frozen dataclass, a
`SourceOptions`; it raises `OptionError(option, message)`. `resolve_paths(options,
base_dir)`, where a format has one, resolves files named in options (not `path`) against the
config's folder.

A format's module is imported on first use: checking a config costs only its formats' libraries,
and the file formats' modules (pyarrow, fastavro, tfx-bsl) are what telling a file's format by
its name costs; no format's module imports Beam. `OptionsReader` gives the checkers one
way to read and check options.
"""

from __future__ import annotations

import codecs
import dataclasses
import functools
import importlib
import re
from typing import Any, Callable, Iterable, Literal

from transforms.contract.config import SOURCE_FORMATS, OptionError, SourceOptions
from transforms.files import COMPRESSION_ENDINGS
from transforms.ui.suggest import did_you_mean

# Formats read by a query (a Beam transform of their own), not from files: they have no `path`.
QUERY_FORMATS = ("sql", "bigquery")
FILE_FORMATS = tuple(fmt for fmt in SOURCE_FORMATS if fmt not in QUERY_FORMATS)
# Whole-file compression, undone by a name's last ending (`transforms.files.open_file`).
FILE_COMPRESSIONS = tuple(COMPRESSION_ENDINGS)


@dataclasses.dataclass(frozen=True)
class Format:
    """A source format, declared by its module as `FORMAT`.

    `extensions`: the file name endings of its files (lower case, with the dot). `compressed`:
    the compression endings its files may carry after them (`FILE_COMPRESSIONS`, or none for
    formats that compress inside). `splittable`: a large uncompressed file is read in byte
    ranges by several workers. `stem_pattern`: a regular expression that a file name without a
    format ending matches when its files are of this format (TFX shards have none).
    """

    name: str
    kind: Literal["file", "query"]
    options_type: type[SourceOptions]
    options: Callable[[dict[str, Any]], SourceOptions]
    reader: Callable[..., Any] | str  # a query format's: `module:name`, imported on first use
    extensions: tuple[str, ...] = ()
    compressed: tuple[str, ...] = ()
    splittable: bool = False
    stem_pattern: str = ""
    resolve_paths: Callable[[Any, str], SourceOptions] | None = None


@functools.cache
def describe(fmt: str) -> Format:
    """The descriptor of the format `fmt` (a name of the contract's `SOURCE_FORMATS`)."""
    if fmt not in SOURCE_FORMATS:
        raise KeyError(f"unknown source format {fmt!r}")
    found = importlib.import_module(f"transforms.sources.{fmt}").FORMAT
    kind = "query" if fmt in QUERY_FORMATS else "file"
    if not isinstance(found, Format) or found.name != fmt or found.kind != kind:
        raise TypeError(
            f"transforms.sources.{fmt}.FORMAT does not describe the {kind} format {fmt}"
        )
    return found


def file_formats() -> tuple[Format, ...]:
    """Every file format's descriptor, in the contract's order."""
    return tuple(describe(fmt) for fmt in FILE_FORMATS)


def check_options(fmt: str, raw: dict[str, Any]) -> SourceOptions:
    """The `fmt` format's options of the mapping `raw`, checked, with their defaults."""
    return describe(fmt).options(raw)


def resolve_paths(fmt: str, options: SourceOptions, base_dir: str) -> SourceOptions:
    """The options with the local files they name resolved against the config's folder."""
    resolve = describe(fmt).resolve_paths
    return resolve(options, base_dir) if resolve is not None else options


def parser(fmt: str) -> Callable[..., Any]:
    """A file format's `parse`."""
    found = describe(fmt).reader
    assert callable(found), f"{fmt} is a query format"
    return found


def reader(fmt: str) -> Callable[..., Any]:
    """A query format's `Read` (a Beam transform), its module imported now: checking a config
    that names a query source imports no Beam."""
    found = describe(fmt).reader
    if isinstance(found, str):
        module, _, name = found.partition(":")
        return getattr(importlib.import_module(module), name)
    return found


# --- what a file's name tells -------------------------------------------------------------------


@functools.cache
def compression_endings() -> tuple[str, ...]:
    """Every compression ending a file format's files may carry, the longest first."""
    endings = {e for f in file_formats() for e in f.compressed}
    return tuple(sorted(endings, key=lambda e: (-len(e), e)))


def split_suffix(path: str) -> tuple[str, str, str]:
    """(stem, format ending, compression ending) of a file name, the endings lower-cased:
    `a/b.Tfrecord.GZ` → (`b`, `.tfrecord`, `.gz`)."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    stem, compression = name, ""
    lower = name.lower()
    for ending in compression_endings():
        if lower.endswith(ending) and len(name) > len(ending):
            stem, compression = name[: -len(ending)], ending
            break
    dot = stem.rfind(".")
    if dot <= 0:
        return stem, "", compression
    return stem[:dot], stem[dot:].lower(), compression


def formats_of_extension(ending: str) -> tuple[str, ...]:
    """The file formats whose files end in `ending` (`.csv`), the likelier first."""
    return tuple(f.name for f in file_formats() if ending.lower() in f.extensions)


def formats_of_name(path: str) -> tuple[str, ...]:
    """The formats that read a file of this name, the likelier first; () when its name tells
    none. A name without a format ending tells one by a compression ending only that format
    reads (`.zz`, TFRecord's zlib) or by the format's `stem_pattern`."""
    stem, ext, compression = split_suffix(path)
    formats = file_formats()
    if ext:
        return tuple(
            f.name
            for f in formats
            if ext in f.extensions and (not compression or compression in f.compressed)
        )
    if compression:
        owners = tuple(f.name for f in formats if compression in f.compressed)
        if len(owners) == 1:
            return owners
    return tuple(f.name for f in formats if f.stem_pattern and re.search(f.stem_pattern, stem))


def extensions() -> tuple[str, ...]:
    """Every file format's file name endings, sorted."""
    return tuple(sorted({e for f in file_formats() for e in f.extensions}))


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
