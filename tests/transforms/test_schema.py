"""Type coercion and validation of records against the features, good and bad values."""

import pyarrow as pa
import pytest

from transforms.contract.config import FeatureSpec
from transforms.records import RecordError
from transforms.schema import SourceColumns, Validator, coerce_feature


def F(name="x", type="float", shape=(), required=True, **kw):
    return FeatureSpec(name=name, type=type, shape=shape, required=required, **kw)


@pytest.mark.parametrize(
    "feature, value, expected",
    [
        (F(type="int"), "42", [42]),
        (F(type="int"), " 007 ", [7]),
        (F(type="int"), 3.0, [3]),
        (F(type="int"), -(2**63), [-(2**63)]),
        (F(type="float"), "1.5", [1.5]),
        (F(type="float"), 2, [2.0]),
        (F(type="float"), "-1e3", [-1000.0]),
        (F(type="string"), "héllo", ["héllo".encode()]),
        (F(type="string"), 12, [b"12"]),
        (F(type="bytes"), b"\x00\xff", [b"\x00\xff"]),
        (F(type="string", shape=(None,)), ["a", "b"], [b"a", b"b"]),
        (F(type="string", shape=(None,)), [], []),
        (F(type="int", shape=(2,)), [1, "2"], [1, 2]),
        (F(type="float"), [4.0], [4.0]),
        (F(type="string", values=("A", "B")), "B", [b"B"]),
        (F(type="int", values=(1, 2)), "2", [2]),
        (F(type="float", min=0, max=1), "1", [1.0]),
    ],
)
def test_coerce_accepts(feature, value, expected):
    assert coerce_feature(feature, value) == expected


@pytest.mark.parametrize(
    "feature, value, reason",
    [
        (F(type="int"), "1.5", "x: not an integer"),
        (F(type="int"), True, "x: not an integer"),
        (F(type="int"), 2**63, "x: integer out of int64 range"),
        (F(type="float"), "abc", "x: not a number"),
        (F(type="float"), "nan", "x: not a number"),
        (F(type="float"), {"a": 1}, "x: not a number"),
        (F(type="string"), {"a": 1}, "x: not a string"),
        (F(type="string"), b"\xff", "x: not valid UTF-8"),
        (F(type="int", shape=(2,)), [1], "x: expected 2 values"),
        (F(type="float"), [1.0, 2.0], "x: expected one value, got a list"),
        (F(type="string", shape=(None,)), 3, "x: expected a list"),
        (F(type="float", min=0), "-0.5", "x: below min 0"),
        (F(type="int", max=10), 11, "x: above max 10"),
        (F(type="string", values=("A", "B")), "C", "x: not one of the allowed values [A, B]"),
        (F(type="int", values=(1, 2)), 3, "x: not one of the allowed values [1, 2]"),
        (F(type="image"), b"not an image", "x: not a decodable image"),
    ],
)
def test_coerce_rejects_with_reason(feature, value, reason):
    with pytest.raises(RecordError) as e:
        coerce_feature(feature, value)
    assert e.value.reason == reason


@pytest.mark.parametrize(
    "feature, value, reason, shown",
    [
        (F("region", "string", values=("C", "N", "S")), "SA", "[C, N, S]", "'SA'"),
        (F(type="int", values=(1, 2)), "7", "[1, 2]", "7"),
        (F(type="string", shape=(None,), values=("a", "b")), ["a", "z", "y"], "[a, b]", "'z'"),
        # a value is cut at 40 characters; what a terminal would act on is escaped
        (F(type="string", values=("A",)), "é" * 50, "[A]", repr("é" * 39 + "…")),
        (F(type="string", values=("A",)), "\x1b[31mred\u202e", "[A]", "'\\x1b[31mred\\u202e'"),
        # allowed values: plain ones as they are, others quoted; the first 8, then a count
        (F(type="string", values=("a b", "", "x'y")), "c", "['a b', '', \"x'y\"]", "'c'"),
        (
            F(type="int", values=tuple(range(20))),
            "99",
            "[0, 1, 2, 3, 4, 5, 6, 7, … 12 more]",
            "99",
        ),
    ],
)
def test_a_value_outside_values_is_shown_beside_a_reason_naming_the_allowed(
    feature, value, reason, shown
):
    with pytest.raises(RecordError) as e:
        coerce_feature(feature, value)
    assert e.value.reason == f"{feature.name}: not one of the allowed values {reason}"
    assert e.value.reason.value == shown
    columns = {feature.name: [value, value]}  # the batch path: the same reason and value
    _, reasons = Validator([feature], ["s"]).validate(2, {"s": SourceColumns(columns)})
    assert [(r, r.value) for r in reasons.values()] == [(e.value.reason, shown)] * 2


def test_csv_list_cells_split_on_the_list_delimiter():
    assert coerce_feature(F(type="int", shape=(None,)), "1|2|3", "|") == [1, 2, 3]
    assert coerce_feature(F(type="int", shape=(None,)), "", "|") == []


def test_image_bytes_that_decode_are_accepted():
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (2, 2), (255, 0, 0)).save(buf, format="PNG")
    assert coerce_feature(F(type="image"), buf.getvalue()) == [buf.getvalue()]


def _validate(features, sources, records):
    """Validates row-shaped records by turning them into per-source columns first."""
    tables = {}
    for src in sources:
        fields = dict.fromkeys(k for r in records for k in r.get(src, {}))
        tables[src] = SourceColumns({f: [r.get(src, {}).get(f) for r in records] for f in fields})
    columns, reasons = Validator(features, sources).validate(len(records), tables)
    rows = [[col[i].as_py() for col in columns] for i in range(len(records))]
    return [None if i in reasons else row for i, row in enumerate(rows)], reasons


def test_validator_fills_missing_optionals_and_rejects_missing_required():
    features = [
        F("a", "int"),
        F("b", "float", required=False, default=[0.5]),
        F("c", "string", required=False),
        F("d", "string", source="s2", field="other name"),
    ]
    records = [
        {"s1": {"a": "1", "b": None}, "s2": {"other name": "z", "a": "9"}},
        {"s1": {"a": None}, "s2": {"other name": "z"}},
        {"s1": {"a": "1", "d": "not from s2"}},
    ]
    rows, reasons = _validate(features, ["s1", "s2"], records)
    assert rows == [[[1], [0.5], [], [b"z"]], None, None]
    assert reasons == {1: "a: missing required value", 2: "d: missing required value"}


def test_validator_takes_a_feature_from_the_first_source_that_has_it():
    rows, _ = _validate(
        [F("a", "int")],
        ["s1", "s2"],
        [{"s1": {"a": None}, "s2": {"a": 5}}, {"s1": {"a": 1}, "s2": {"a": 5}}],
    )
    assert rows == [[[5]], [[1]]]


def test_the_first_failing_feature_gives_the_reason():
    features = [F("a", "int"), F("b", "float", min=0)]
    _, reasons = _validate(
        features, ["s"], [{"s": {"a": "x", "b": "-1"}}, {"s": {"a": "1", "b": "-1"}}]
    )
    assert reasons == {0: "a: not an integer", 1: "b: below min 0"}


ODD_VALUES = [
    None,
    "",
    " 42 ",
    "42",
    "-7",
    "+3",
    "1_000",
    "1e3",
    "1.5",
    ".5",
    "5.",
    "-0",
    "abc",
    "nan",
    "inf",
    "-Infinity",
    " +INF ",
    float("inf"),
    float("-inf"),
    "9223372036854775807",
    "9223372036854775808",
    "0x10",
    "٣",
    "1 2",
    "  ",
    "1e400",
    "1E-3",
    7,
    7.0,
    7.5,
    True,
    "caf\udce9",
    ["1"],
    [],
    {"a": 1},
    "Adelie",
]


TYPED_COLUMNS = [
    pa.array([1, -5, None, 2**62, 42, 7], pa.int64()),
    pa.array([0, 2**64 - 1, None, 7], pa.uint64()),
    pa.array([3, None, -2], pa.int8()),
    pa.array([1.5, float("nan"), None, float("inf"), -0.0, 42.0, 7.0], pa.float64()),
    pa.array([1.0, 2.5, None, float("-inf")], pa.float32()),
    pa.array(["a", None, "Adelie", "42", " 7"], pa.string()),
    pa.array([True, False, None]),
    pa.array([b"x", None, b"\xff"], pa.binary()),
]


@pytest.mark.parametrize("ftype", ["int", "float", "string"])
@pytest.mark.parametrize(
    "extra", [{}, {"min": 0, "max": 100}, {"required": False}, {"allow": ("infinity",)}]
)
def test_batch_validation_agrees_with_per_value_coercion(ftype, extra):
    """The vectorized path must give exactly what coerce_feature gives, value by value."""
    kw = {"required": True, **extra}
    if ftype == "string":
        kw.pop("min", None), kw.pop("max", None)
        kw["values"] = ("Adelie", "42", "7") if extra.get("min") is not None else None
    if ftype == "int" and extra.get("min") is not None:
        kw["values"] = (0, 7, 42, 2**62)
    feature = F("x", ftype, **kw)
    texts = [v for v in ODD_VALUES if isinstance(v, str) or v is None]
    cases = [(ODD_VALUES, False), (texts, True), (texts, False), ([1, 2, None, 3], False)]
    cases += [(array, False) for array in TYPED_COLUMNS]  # typed Arrow columns (Parquet, ...)
    for column, text in cases:
        given = column if isinstance(column, pa.Array) else list(column)
        columns, reasons = Validator([feature], ["s"]).validate(
            len(column), {"s": SourceColumns({"x": given}, text)}
        )
        if isinstance(column, pa.Array):
            column = column.to_pylist()
        rows = [None if i in reasons else [columns[0][i].as_py()] for i in range(len(column))]
        for i, value in enumerate(column):
            if value is None or (isinstance(value, list) and not value):
                expected = ("x: missing required value", None) if feature.required else (None, [[]])
            else:
                try:
                    expected = (None, [coerce_feature(feature, value)])
                except RecordError as e:
                    expected = (e.reason, None)
            # a value outside `values` is shown beside the reason, alike on both paths
            got = (reasons.get(i), getattr(reasons.get(i), "value", None), rows[i])
            expected = (expected[0], getattr(expected[0], "value", None), expected[1])
            if ftype == "float" and expected[2] and expected[2][0]:
                import struct

                f32 = struct.unpack("f", struct.pack("f", expected[2][0][0]))[0]
                expected = (None, None, [[f32]])
            assert got == expected, (value, column is ODD_VALUES)


@pytest.mark.parametrize("value", ["inf", "-Infinity", " +INF\t", float("inf"), float("-inf")])
def test_infinity_is_rejected_unless_the_feature_allows_it(value):
    """An inf label trains a NaN model: not a value unless `allow: [infinity]`."""
    sign = "-" if str(value).strip().startswith("-") else ""
    with pytest.raises(RecordError) as e:
        coerce_feature(F("x", "float"), value)
    assert e.value.reason == f"x: not a finite number ({sign}inf)"
    assert coerce_feature(F("x", "float", allow=("infinity",)), value) == [float(f"{sign}inf")]
    for column in ([value, "1.5"], pa.array([float(value), 1.5], pa.float64())):
        _, reasons = Validator([F("x", "float")], ["s"]).validate(
            2,
            {
                "s": SourceColumns(
                    {"x": column}, isinstance(column, list) and isinstance(value, str)
                )
            },
        )
        assert reasons == {0: f"x: not a finite number ({sign}inf)"}


def test_float_text_beyond_float32_is_out_of_range_even_where_infinity_is_allowed():
    allowing = F("x", "float", allow=("infinity",))
    for feature in (F("x", "float"), allowing):
        for value in ("1e39", "-3.5e38", 1e39, "1e400"):
            with pytest.raises(RecordError, match="x: outside float32 range"):
                coerce_feature(feature, value)
    with pytest.raises(RecordError, match="x: not a number"):
        coerce_feature(allowing, "nan")
