"""Values at the edges of the schema, one test per case: keys that are not text, image headers
that claim too many pixels, number syntax, float32 and int64 bounds, huge values in the
statistics and the report, and report ids for any feature name.

Most tests call the element functions (`coerce_feature`, `Validator`, `KeyMaker`, the
statistics, `render`); one in-process ETL run (`values`) shows the same outcomes end to end: a
CSV, a JSONL and a Parquet source in one union, keyed by a field that is not a feature.

Rules (also listed in tests/reliability/README.md):
- A key that is not valid text (a lone surrogate from a CSV byte that is not UTF-8 or a JSON
  `"\\udc80"` escape; bytes that are not UTF-8) rejects its record: `id: not valid text`. Keys
  that are numbers, objects, lists (of bytes, dates...) become text; nothing fails the job.
- An image whose header claims more than `PIL.Image.MAX_IMAGE_PIXELS` pixels is rejected before
  it is decoded, from any source, by the images source's own check: `FEATURE: too many pixels
  to decode`.
- int text: `[+-]?[0-9]+`; float text: ASCII decimal or scientific notation, or inf/infinity;
  ASCII whitespace around either is allowed, nothing else (`1_000`, `１２`, `٣`, a no-break
  space) is a number.
- float: a finite value that float32 would make infinite is `outside float32 range`, a nonzero
  one it would make 0 is `too small for float32 (would be 0)`; inf is `not a finite number
  (inf)` unless the feature says `allow: [infinity]`. int: beyond int64 is `integer out of
  int64 range`.
- statistics.json keeps at most 200 bytes of a string value (then `… (N bytes, sha256 …)`);
  the report shows at most 400 characters of any text from the data (then `… (N bytes)`).
- Report ids escape every character but letters, digits, `_` and `.`: one id per name.
"""

from __future__ import annotations

import datetime
import hashlib
import io
import json
import struct
import zlib
from collections import Counter
from html.parser import HTMLParser

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from PIL import Image

from pipelines.etl import run
from pipelines.report.page import render
from tests import readback
from transforms.contract.config import DatasetSpec, FeatureSpec, OutputSpec, SourceSpec
from transforms.contract.layout import STATISTICS_FORMAT_VERSION
from transforms.contract.manifest import Manifest
from transforms.contract.statistics import Statistics
from transforms.imaging import decode
from transforms.keys import KeyMaker
from transforms.records import RawChunk, one_line_records
from transforms.schema import (
    RecordError,
    SourceColumns,
    Validator,
    coerce_feature,
    coerce_scalar,
)
from transforms.sources.jsonl import JsonlOptions
from transforms.stats import DatasetStats, chunk_stats, column_stats

MB10 = 10 * 2**20


def F(name="x", type="float", shape=(), required=True, **kw):
    return FeatureSpec(name=name, type=type, shape=shape, required=required, **kw)


def _png(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height RGB pixels (checksums right, no pixel data)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunks = [(b"IHDR", header), (b"IDAT", zlib.compress(b"")), (b"IEND", b"")]
    return b"\x89PNG\r\n\x1a\n" + b"".join(chunk(kind, data) for kind, data in chunks)


def _small_png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (2, 2), (0, 128, 255)).save(buf, format="PNG")
    return buf.getvalue()


PNG = _small_png()
BOMB = _png(100_000, 100_000)  # 10**10 pixels: Pillow itself refuses (more than twice its limit)
WARNED = _png(10_000, 10_000)  # 10**8 pixels: above the limit, where Pillow only warns


def _dataset(key_feature: FeatureSpec | None = None) -> DatasetSpec:
    features = (key_feature,) if key_feature else (F("v", "string", required=False),)
    return DatasetSpec(
        name="d",
        sources=(SourceSpec("s", "jsonl", "s.jsonl", JsonlOptions()),),
        features=features,
        splits=(("train", 1.0),),
        output=OutputSpec("/tmp/unused"),
        key="id",
    )


def _batch(feature: FeatureSpec, column, text: bool = False) -> list:
    """Per value, the Validator's outcome: its reason, or its written (float32 / int64) value."""
    n = len(column)
    tables = {"s": SourceColumns({feature.name: column}, text)}
    columns, reasons = Validator([feature], ["s"]).validate(n, tables)
    out = []
    for i in range(n):
        written = columns[0][i].as_py()
        out.append(reasons[i] if i in reasons else written[0] if written else None)
    return out


def _single(feature: FeatureSpec, value):
    try:
        return coerce_feature(feature, value)[0]
    except RecordError as e:
        return e.reason


# --- 1. keys --------------------------------------------------------------------------------------


def test_a_key_that_is_not_valid_text_rejects_its_record_and_the_rest_go_on():
    maker = KeyMaker(_dataset())
    values = ["\udc80", "caf\udce9", b"\xff", [b"\xff"], "k1", b"k2"]
    raws = [json.dumps({"id": v if isinstance(v, str) else repr(v)}) for v in values]
    chunk = RawChunk("s", "s.jsonl", {"id": values}, [1, 2, 3, 4, 5, 6], **one_line_records(raws))
    keys, rejected = maker.keys(chunk)
    assert keys.to_pylist() == [None, None, None, None, "k1", "k2"]
    assert [(r.location, r.reason) for r in rejected] == [
        (f"s.jsonl:{line}", "id: not valid text") for line in (1, 2, 3, 4)
    ]
    # a key that is a bytes feature: typed first, then the same rule
    assert _single_key(KeyMaker(_dataset(F("id", "bytes"))), b"\xff") == "id: not valid text"


def _single_key(maker: KeyMaker, value):
    try:
        return maker(value)
    except RecordError as e:
        return e.reason


@pytest.mark.parametrize(
    "value, key",
    [
        (7, "7"),
        (7.5, "7.5"),
        (float("inf"), "inf"),
        (float("nan"), "nan"),
        (True, "True"),
        ("٣", "٣"),  # a text key is any valid text
        (b"bytes", "bytes"),  # TFRecord and Parquet binary values are text keys too
        ({"b": [1, 2], "a": "x"}, '{"a": "x", "b": [1, 2]}'),
        ([b"tf", b"record"], '["tf", "record"]'),
        ({"day": datetime.date(2024, 1, 2), "v": None}, '{"day": "2024-01-02", "v": null}'),
        ({"a": "\udc80"}, '{"a": "\\udc80"}'),  # inside JSON, escaped: still valid text
    ],
)
def test_keys_of_every_kind_of_value_become_text(value, key):
    assert _single_key(KeyMaker(_dataset()), value) == key


# --- 2. image headers claiming too many pixels ----------------------------------------------------


def test_an_image_feature_with_a_decompression_bomb_header_is_rejected_like_the_images_source():
    photo = F("photo", "image", required=False)
    for data in (BOMB, WARNED):
        assert _single(photo, data) == "photo: too many pixels to decode"
        with pytest.raises(RecordError) as e:
            decode(data)  # the images source's check, field `image`
        assert e.value.reason == "image: too many pixels to decode"
    expected = [PNG, "photo: too many pixels to decode", "photo: too many pixels to decode"]
    parquet = pa.array([PNG, BOMB, WARNED], pa.binary())  # a typed bytes column
    tfrecord = [[PNG], [BOMB], [WARNED]]  # bytes_list of one value each
    assert _batch(photo, parquet) == _batch(photo, tfrecord) == expected


# pytest resets the warning filters for each test; in a run, transforms.sources.images silences
# Pillow's warning (about the images it rejects) once per process.
@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_the_pixel_limit_is_pillows_max_image_pixels(monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 3)  # the 2 x 2 image is above it
    assert _single(F("photo", "image"), PNG) == "photo: too many pixels to decode"
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 4)
    assert _single(F("photo", "image"), PNG) == PNG


# --- 3 and 4. number syntax and bounds ------------------------------------------------------------

NOT_INT = "x: not an integer"
INT64 = "x: integer out of int64 range"
INT_TEXT = [
    ("42", 42), (" 42 ", 42), ("\t-7\r\n", -7), ("+3", 3), ("007", 7), ("-0", 0),
    ("9223372036854775807", 2**63 - 1), ("-9223372036854775808", -(2**63)),
    ("1_000", NOT_INT), ("１２", NOT_INT), ("٣", NOT_INT), ("\u00a042", NOT_INT),
    ("42\u3000", NOT_INT), ("1e3", NOT_INT), ("1.0", NOT_INT), ("0x10", NOT_INT), ("", NOT_INT),
    (" ", NOT_INT), ("+-1", NOT_INT), ("1 2", NOT_INT), ("inf", NOT_INT),
    ("9223372036854775808", INT64), ("-9223372036854775809", INT64), ("1" + "0" * 5000, INT64),
    ("0" * 30 + "1", 1),
]  # fmt: skip

NAN = "x: not a number"
OVER = "x: outside float32 range"
UNDER = "x: too small for float32 (would be 0)"
INF, NEG_INF = "x: not a finite number (inf)", "x: not a finite number (-inf)"
SUBNORMAL = float(np.float32(1e-45))  # the smallest float32 above 0, 2**-149
FLOAT_TEXT = [
    ("1.5", 1.5), (" 2 ", 2.0), ("-1e3", -1000.0), (".5", 0.5), ("5.", 5.0), ("+.5E-3", 0.0005),
    ("inf", INF), ("-Infinity", NEG_INF), ("INF", INF),
    ("3.4028235e38", 3.4028235e38), ("-3.4028235e38", -3.4028235e38), ("1e-45", 1e-45),
    ("0", 0.0), ("-0.0", -0.0),
    ("1_000.5", NAN), ("１.５", NAN), ("٣", NAN), ("nan", NAN), ("-NaN", NAN), ("0x1p3", NAN),
    ("1,5", NAN), ("\u00a01", NAN), ("infinit", NAN), ("", NAN), ("1e", NAN), ("e3", NAN),
    ("1e39", OVER), ("-1e39", OVER), ("3.5e38", OVER), ("1e400", OVER), ("-1e400", OVER),
    ("1e-50", UNDER), ("-1e-50", UNDER), ("7e-46", UNDER), ("1e-400", UNDER), ("-5e-999", UNDER),
    ("0e-400", 0.0), ("0.000e5", 0.0),
]  # fmt: skip


def _expected(ftype: str, outcome):
    """What the Validator writes: float values as float32 (3.4028235e38 as float32's largest,
    1e-45 as its smallest subnormal)."""
    if ftype == "float" and not isinstance(outcome, str):
        return float(np.float32(outcome))
    return outcome


@pytest.mark.parametrize("ftype, cases", [("int", INT_TEXT), ("float", FLOAT_TEXT)])
def test_number_text_has_one_syntax_in_the_python_and_the_arrow_paths(ftype, cases):
    feature = F("x", ftype)
    texts = [t for t, _ in cases]
    single = [_single(feature, t) for t in texts]
    assert single == [outcome for _, outcome in cases]
    written = [_expected(ftype, outcome) for _, outcome in cases]
    assert _batch(feature, texts, text=True) == written  # CSV text, Arrow path
    assert _batch(feature, pa.array(texts), text=True) == written  # Arrow text column
    assert _batch(feature, [*texts, 1], text=False)[:-1] == written  # JSON strings, mixed types
    # one value at a time (a list feature checks each value with the Python path)
    assert coerce_feature(F("x", ftype, shape=(None,)), texts[:2]) == single[:2]


@pytest.mark.parametrize(
    "ftype, values, outcomes",
    [
        ("float", [1e39, -1e39, 1e-50, float("inf"), 3.0, 10**39, 10**400, 1e-45],
         [OVER, OVER, UNDER, INF, 3.0, OVER, OVER, 1e-45]),
        ("int", [2**63, -(2**63) - 1, 1e19, 7.0, 2**63 - 1], [INT64, INT64, INT64, 7, 2**63 - 1]),
    ],
)  # fmt: skip
def test_json_numbers_beyond_float32_or_int64_are_rejected(ftype, values, outcomes):
    feature = F("x", ftype)
    assert [_single(feature, v) for v in values] == outcomes
    assert _batch(feature, values) == [_expected(ftype, o) for o in outcomes]


JSON_LINES = [
    # (a JSON line, what `x` as a float feature gets, what `x` as an int feature gets)
    ('{"x": 1e400}', OVER, NOT_INT),
    ('{"x": -1e400}', OVER, NOT_INT),
    ('{"x": 1e-400}', UNDER, NOT_INT),
    ('{"x": 0e-400}', 0.0, 0),
    ('{"x": 9007199254740993.0}', 9007199254740993.0, NOT_INT),  # float64 would round it
    ('{"x": 9007199254740992.0}', 9007199254740992.0, NOT_INT),
    ('{"x": 4503599627370497.0}', 4503599627370497.0, 4503599627370497),  # under 2**53: exact
    ('{"x": 7.0}', 7.0, 7),
    ('{"x": 9007199254740993}', 9007199254740993.0, 9007199254740993),
    ('{"x": ' + "1" * 5000 + "}", OVER, INT64),
    ('{"x": -' + "1" * 5000 + "}", OVER, INT64),
]


@pytest.mark.parametrize(("line", "as_float", "as_int"), JSON_LINES)
def test_a_json_number_is_exact_or_rejected_never_rounded_to_another(line, as_float, as_int):
    """JSON numbers follow the CSV text rules: beyond float64 is out of range (never infinity),
    under it too small (never 0.0), an integral float past 2**53 is no exact integer."""
    from transforms.sources.jsonl import parse_line

    fields, reason = parse_line(line)
    assert reason is None
    assert _single(F("x", "float"), fields["x"]) == as_float
    assert _single(F("x", "int"), fields["x"]) == as_int
    assert _batch(F("x", "float"), [fields["x"], 1.5])[0] == _expected("float", as_float)
    assert _batch(F("x", "int"), [fields["x"], 2])[0] == as_int


@pytest.mark.parametrize(
    "line", ['{"x": 1, "x": 2}', '{"x": {"a": 1, "a": 1}}', '{"y":[{"k":1,"k":2}]}']
)
def test_a_json_object_with_a_key_twice_is_rejected_whatever_its_depth(line):
    from transforms.sources.jsonl import parse_line

    assert parse_line(line) == (None, "json: duplicate key")


def test_typed_columns_beyond_float32_or_int64_are_rejected():
    floats = pa.array([1e39, -1e39, 1e-50, float("inf"), -0.0, 3.0, 1e-45, None], pa.float64())
    assert _batch(F("x", "float", required=False), floats) == [
        OVER,
        OVER,
        UNDER,
        INF,
        -0.0,
        3.0,
        SUBNORMAL,
        None,
    ]
    ints = pa.array([2**63, 2**63 - 1, 5], pa.uint64())
    assert _batch(F("x", "int"), ints) == [INT64, 2**63 - 1, 5]


def test_float32_bounds_come_before_min_and_max():
    feature = F("x", "float", min=0, max=10)
    texts = ("1e39", "1e-50", "11")
    assert [_single(feature, t) for t in texts] == [OVER, UNDER, "x: above max 10"]
    assert _batch(feature, ["1e39", "1e-50", "11", "-1"], text=True) == [
        OVER,
        UNDER,
        "x: above max 10",
        "x: below min 0",
    ]


# --- 5. long values in statistics.json and report.html --------------------------------------------

LONG_A = b"a" * MB10
LONG_B = b"a" * (MB10 - 1) + b"b"  # the same first 200 bytes as LONG_A


def _clipped(value: bytes) -> str:
    return f"{'a' * 200}… ({len(value)} bytes, sha256 {hashlib.sha256(value).hexdigest()[:16]})"


def _string_column(values: list[bytes]) -> pa.Array:
    return pa.array([[v] for v in values], pa.list_(pa.binary()))


def test_statistics_of_long_strings_stay_small_and_count_exactly():
    stats = column_stats("string", _string_column([LONG_A, LONG_B, LONG_A, b"short"]))
    out = stats.to_json()
    assert len(json.dumps(out)) < 100_000
    assert out["top"] == [
        {"value": _clipped(LONG_A), "count": 2},
        {"value": _clipped(LONG_B), "count": 1},
        {"value": "short", "count": 1},
    ]
    assert (out["distinct"], out["distinct_exact"], out["length"]["max"]) == (3, True, MB10)
    # chunks merge on the clipped value: the same long value counts once, wherever it was
    merged = DatasetStats()
    for values in ([LONG_A], [LONG_A, LONG_B]):
        split = np.zeros(len(values), np.int16)
        merged.merge(chunk_stats(["s"], ["string"], [_string_column(values)], split))
    top = merged.to_json(["train"])["splits"]["train"]["features"]["s"]["top"]
    assert top == [{"value": _clipped(LONG_A), "count": 2}, {"value": _clipped(LONG_B), "count": 1}]


def test_a_multibyte_value_is_cut_between_characters():
    value = "é".encode() * 150  # 300 bytes: the cut at 200 bytes falls between two characters
    (top,) = column_stats("string", _string_column([value])).to_json()["top"]
    digest = hashlib.sha256(value).hexdigest()[:16]
    assert top["value"] == "é" * 100 + f"… (300 bytes, sha256 {digest})"


def _manifest(
    features: dict[str, str],
    reasons: dict[str, int] | None = None,
    ignored: dict[str, int] | None = None,
) -> Manifest:
    """A manifest of `features` (name: type) whose source `s` ignored the fields `ignored`."""
    reasons = reasons or {}
    return Manifest.from_dict({
        "format_version": 1,
        "name": "values",
        "created": "2026-01-01T00:00:00Z",
        "features": {f: {"type": t, "shape": []} for f, t in features.items()},
        "sources": {"s": {"format": "jsonl", "records": 4, "ignored_fields": ignored or {}}},
        "splits": {"train": {"records": 4, "files": []}},
        "rejected": {"records": sum(reasons.values()), "reasons": reasons, "files": []},
        "duplicates": 0,
    })  # fmt: skip


def _statistics(splits: dict) -> Statistics:
    """The typed statistics of splits written out as in statistics.json."""
    return Statistics.from_json({"format_version": STATISTICS_FORMAT_VERSION, "splits": splits})


def test_the_report_stays_small_with_long_values_and_long_rejected_records():
    long_text = "x" * MB10
    stats = column_stats("string", _string_column([LONG_A, LONG_B, b"short"])).to_json()
    old = {**stats, "top": [{"value": long_text, "count": 1}]}  # an unclipped statistics file
    statistics = _statistics({"train": {"records": 4, "features": {"s": stats, "t": old}}})
    reason = "n: not an integer"
    examples = {reason: [{"location": "s.jsonl:3", "record": long_text}] * 5}
    manifest = _manifest({"s": "string", "t": "string"}, {reason: 5})
    page = render(manifest, statistics, None, None, examples)
    assert len(page.encode()) < 500_000
    shown = "x" * 400 + f"… ({MB10} bytes)"
    assert page.count(f"<pre>{shown}</pre>") == 5
    doc = _Ids(page)
    assert [a["data-value"] for a in doc.bars("top-train-s")] == [t["value"] for t in stats["top"]]
    expected = sorted([_clipped(LONG_A), _clipped(LONG_B), "short"])
    assert sorted(t["value"] for t in stats["top"]) == expected
    assert [a["data-value"] for a in doc.bars("top-train-t")] == [shown]


# --- 6. report ids --------------------------------------------------------------------------------


class _Ids(HTMLParser):
    """Every element's attributes, in order, with the id of its enclosing svg and table row."""

    def __init__(self, page: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict, str | None]] = []
        self.rows: list[list[str]] = []  # the text of each table row
        self._svg: str | None = None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg":
            self._svg = a.get("id")
        if tag == "tr":
            self.rows.append([])
        self.tags.append((tag, a, self._svg))

    handle_startendtag = handle_starttag

    def handle_endtag(self, tag):
        if tag == "svg":
            self._svg = None

    def handle_data(self, data):
        if self.rows:
            self.rows[-1].append(data)

    def ids(self) -> list[str]:
        return [a["id"] for _, a, _ in self.tags if "id" in a]

    def bars(self, svg_id: str) -> list[dict]:
        return [a for t, a, svg in self.tags if t == "rect" and svg == svg_id]


NAMES = {  # feature name → its part of the element ids
    "größe": "größe",
    "größe_": "größe_",
    "gro\u0308ße": "gro:cc:88ße",  # NFD: a combining mark is escaped
    "大小": "大小",
    "サイズ": "サイズ",
    "a b": "a:20b",
    "a-b": "a:2db",
    "a_b": "a_b",
    "a:20b": "a:3a20b",
}


def test_report_ids_are_unique_for_every_feature_name_and_point_to_its_numbers():
    features = {}
    for i, name in enumerate(NAMES):  # a distinct missing count per feature tells them apart
        kind = "float" if i % 2 else "string"
        s = {"type": kind, "records": 100, "missing": i, "missing_rate": i / 100, "values": 100 - i}
        if kind == "float":
            bars = [{"low": 0.0, "high": 1.0, "count": 1}]
            s.update(min=0.0, max=1.0, mean=0.5, std=0.1, histogram=bars)
        else:
            s.update(distinct=1, distinct_exact=True, top=[{"value": name, "count": 1}],
                     length={"min": 1, "max": 1, "mean": 1.0})  # fmt: skip
        features[name] = s
    statistics = _statistics({"train": {"records": 100, "features": features}})
    manifest = _manifest(
        {n: s["type"] for n, s in features.items()}, ignored={n: i for i, n in enumerate(NAMES)}
    )
    page = render(manifest, statistics)
    doc = _Ids(page)
    ids = doc.ids()
    assert [i for i, n in Counter(ids).items() if n > 1] == []
    by_id = {a["id"]: a for _, a, _ in doc.tags if "id" in a}
    for i, (name, part) in enumerate(NAMES.items()):
        assert by_id[f"stat-train-{part}-missing"]["data-value"] == str(i)
        assert by_id[f"source-s-ignored-{part}"]["data-value"] == str(i)
        chart = f"{'hist' if i % 2 else 'top'}-train-{part}"
        assert chart in by_id
    # each number sits in its feature's card
    for i, (name, part) in enumerate(NAMES.items()):
        card = page[page.index(f'id="feature-{part}"') :].split('<div class="feature"', 1)[0]
        assert f'id="stat-train-{part}-missing" data-value="{i}"' in card


def test_a_very_long_name_gets_a_short_id_of_its_own():
    a, b = "x" * 5000 + "1", "x" * 5000 + "2"
    manifest = _manifest({"x": "float"}, ignored={a: 1, b: 2})  # a manifest has a feature
    ids = [i for i in _Ids(render(manifest)).ids() if i.startswith("source-s-ignored-")]
    assert len(ids) == 2 and len(set(ids)) == 2
    assert all(len(i) < 200 for i in ids)


# --- the same cases end to end --------------------------------------------------------------------

ROWS_CSV = (
    b"id,n,x\n"
    b"r1,1,1.5\n"  # 2: written
    b"\xff,2,2.5\n"  # 3: the key is not UTF-8
    b"r3,1_000,\n"  # 4
    b"r4,\xef\xbc\x91\xef\xbc\x92,\n"  # 5: full-width 12
    b"r5,9223372036854775808,\n"  # 6
    b"r6,,1e39\n"  # 7
    b"r7,,-1e39\n"  # 8
    b"r8,,1e-50\n"  # 9
    b"r9,,inf\n"  # 10: inf
    b"r10,\xd9\xa3,\n"  # 11: Arabic-Indic 3
)
JSONL_LINES = [
    {"id": "\udc80", "n": 1},                                # 1: a lone surrogate
    {"id": 1.5, "n": 2},                                     # 2: written
    {"id": {"b": [1, 2], "a": "x"}, "n": 3},                 # 3: written
    {"id": "j4", "x": 1e39},                                 # 4: a JSON number beyond float32
    {"id": "j5", "x": "1e-50"},                              # 5: a JSON string
    {"id": "j6", "x": "1_000"},                              # 6
    {"id": "j7", "text": "a" * MB10},                        # 7: written
    {"id": "j8", "text": "a" * (MB10 - 1) + "b"},            # 8: written
    {"id": "j9", "text": "a" * MB10, "n": "x"},              # 9: a 10 MB rejected record
    {"id": "j10", "a b": "space", "a_b": "underscore"},      # 10: written
]  # fmt: skip
PARQUET = {
    "id": [b"p1", b"p2", b"p3", b"p4", b"\xff"],
    "photo": [PNG, BOMB, None, None, PNG],
    "x": [None, None, 1e39, 1e-50, None],
}


@pytest.fixture(scope="module")
def values(tmp_path_factory):
    d = tmp_path_factory.mktemp("values")
    (d / "rows.csv").write_bytes(ROWS_CSV)
    lines = [json.dumps(r, ensure_ascii=True) for r in JSONL_LINES]  # "\udc80" as an escape
    (d / "lines.jsonl").write_text("\n".join(lines) + "\n")
    table = pa.table({
        "id": pa.array(PARQUET["id"], pa.binary()),
        "photo": pa.array(PARQUET["photo"], pa.binary()),
        "x": pa.array(PARQUET["x"], pa.float64()),
    })  # fmt: skip
    pq.write_table(table, d / "blobs.parquet")
    config = {
        "name": "values",
        "sources": [
            {"name": "rows", "format": "csv", "path": "rows.csv"},
            {"name": "lines", "format": "jsonl", "path": "lines.jsonl"},
            {"name": "blobs", "format": "parquet", "path": "blobs.parquet"},
        ],
        "key": "id",
        "features": {
            "n": {"type": "int", "required": False},
            "x": {"type": "float", "required": False},
            "photo": {"type": "image", "required": False},
            "text": {"type": "string", "required": False},
            "a b": {"type": "string", "required": False},
            "a_b": {"type": "string", "required": False},
        },
        "splits": {"train": 0.5, "eval": 0.5},
        "output": {"path": "out", "max_rejected_fraction": 1},  # bad values are the point
    }
    (d / "values.yaml").write_text(yaml.safe_dump(config, allow_unicode=True))
    assert run(["--config", str(d / "values.yaml"), "--output", str(d / "out")]) == 0
    out = d / "out"
    manifest = readback.manifest(out)
    names = ["n", "x", "photo", "text", "a b", "a_b"]
    written = readback.rows(out, manifest, names)
    rejected = {(r["source"], r["location"].rsplit("/", 1)[-1]): r for r in readback.rejected(out)}
    return out, manifest, written, rejected


REJECTED = {
    ("rows", "rows.csv:3"): "id: not valid text",
    ("rows", "rows.csv:4"): "n: not an integer",
    ("rows", "rows.csv:5"): "n: not an integer",
    ("rows", "rows.csv:6"): "n: integer out of int64 range",
    ("rows", "rows.csv:7"): "x: outside float32 range",
    ("rows", "rows.csv:8"): "x: outside float32 range",
    ("rows", "rows.csv:9"): "x: too small for float32 (would be 0)",
    ("rows", "rows.csv:10"): "x: not a finite number (inf)",
    ("rows", "rows.csv:11"): "n: not an integer",
    ("lines", "lines.jsonl:1"): "id: not valid text",
    ("lines", "lines.jsonl:4"): "x: outside float32 range",
    ("lines", "lines.jsonl:5"): "x: too small for float32 (would be 0)",
    ("lines", "lines.jsonl:6"): "x: not a number",
    ("lines", "lines.jsonl:9"): "n: not an integer",
    ("blobs", "blobs.parquet:2"): "photo: too many pixels to decode",
    ("blobs", "blobs.parquet:3"): "x: outside float32 range",
    ("blobs", "blobs.parquet:4"): "x: too small for float32 (would be 0)",
    ("blobs", "blobs.parquet:5"): "id: not valid text",
}


@pytest.mark.slow
def test_an_etl_run_rejects_each_bad_value_with_its_reason_and_goes_on(values):
    _, manifest, written, rejected = values
    assert {k: r["reason"] for k, r in rejected.items()} == REJECTED
    assert manifest["rejected"]["reasons"] == dict(Counter(REJECTED.values()))
    read = sum(s["records"] for s in manifest["sources"].values())
    assert (read, len(written), manifest["duplicates"]) == (25, 7, 0)
    assert rejected["rows", "rows.csv:3"]["record"] == "\\xff,2,2.5\n"
    no, a = (), (b"a" * MB10,)
    assert written == sorted([
        ((1,), (1.5,), no, no, no, no),                            # r1
        ((2,), no, no, no, no, no),                                # id 1.5
        ((3,), no, no, no, no, no),                                # id {"a": ..., "b": ...}
        (no, no, no, a, no, no),                                   # j7
        (no, no, no, (b"a" * (MB10 - 1) + b"b",), no, no),         # j8
        (no, no, no, no, (b"space",), (b"underscore",)),           # j10
        (no, no, (PNG,), no, no, no),                              # p1
    ])  # fmt: skip


@pytest.mark.slow
def test_an_etl_run_with_10_mb_values_keeps_its_statistics_and_report_small(values):
    out, manifest, _, _ = values
    statistics = out / manifest["statistics"]["path"]
    assert statistics.stat().st_size < 100_000
    assert (out / "report.html").stat().st_size < 500_000
    stats = json.loads(statistics.read_text())
    text = {
        v["value"] for split in stats["splits"].values() for v in split["features"]["text"]["top"]
    }
    assert text == {_clipped(LONG_A), _clipped(LONG_B)}
    ids = _Ids((out / "report.html").read_text()).ids()
    assert [i for i, n in Counter(ids).items() if n > 1] == []
    assert {"stat-train-a:20b-missing", "stat-train-a_b-missing"} <= set(ids)


def test_a_lone_surrogate_for_a_bytes_feature_is_rejected_and_undecoded_bytes_come_back():
    """JSON may spell any lone surrogate; only those a reader made of undecodable bytes
    (\\udc80-\\udcff) stand for bytes."""
    feature = F("b", "bytes")
    assert coerce_scalar(feature, "a\udc80") == b"a\x80"
    with pytest.raises(RecordError, match=r"^b: not valid text in the source's encoding$"):
        coerce_scalar(feature, "\ud800")


def _png_chunks(png: bytes) -> list[tuple[bytes, bytes]]:
    at, chunks = 8, []
    while at < len(png):
        (length,) = struct.unpack_from(">I", png, at)
        chunks.append((png[at + 4 : at + 8], png[at + 8 : at + 8 + length]))
        at += 12 + length
    return chunks


def _png_of(chunks, bad_crc: bytes | None = None) -> bytes:
    out = b"\x89PNG\r\n\x1a\n"
    for kind, data in chunks:
        crc = zlib.crc32(kind + data) ^ (0xFFFF if kind == bad_crc else 0)
        out += struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)
    return out


def test_a_png_pillow_reads_but_tensorflows_decoder_refuses_is_rejected_by_the_etl():
    """An IDAT chunk failing its CRC, or an unknown critical chunk: Pillow decodes both, libpng
    (tf.io.decode_png) refuses both, in every training run. The ETL rejects them with the
    reason; a sound PNG passes."""
    import tensorflow as tf

    chunks = _png_chunks(_small_png())
    idat_crc = _png_of(chunks, bad_crc=b"IDAT")
    unknown = _png_of([*chunks[:1], (b"ZZZZ", b"hello"), *chunks[1:]])
    refused = "x: a PNG TensorFlow's decoder refuses (a critical chunk fails its CRC or is unknown)"
    for png in (idat_crc, unknown):
        Image.open(io.BytesIO(png)).load()  # Pillow reads it
        with pytest.raises(tf.errors.InvalidArgumentError):
            tf.io.decode_png(png)
        assert _single(F("x", "image"), png) == refused
    png = _png_of(chunks)
    tf.io.decode_png(png)
    assert _single(F("x", "image"), png) == png
