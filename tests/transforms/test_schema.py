"""Type coercion and validation of records against the features, good and bad values."""

import pytest

from transforms.schema import RecordError, Validator, coerce_feature
from transforms.spec import FeatureSpec


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
        (F(type="string", values=("A", "B")), "C", "x: not one of the allowed values"),
        (F(type="image"), b"not an image", "x: not a decodable image"),
    ],
)
def test_coerce_rejects_with_reason(feature, value, reason):
    with pytest.raises(RecordError) as e:
        coerce_feature(feature, value)
    assert e.value.reason == reason


def test_csv_list_cells_split_on_the_list_delimiter():
    assert coerce_feature(F(type="int", shape=(None,)), "1|2|3", "|") == [1, 2, 3]
    assert coerce_feature(F(type="int", shape=(None,)), "", "|") == []


def test_image_bytes_that_decode_are_accepted():
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (2, 2), (255, 0, 0)).save(buf, format="PNG")
    assert coerce_feature(F(type="image"), buf.getvalue()) == [buf.getvalue()]


def test_validator_fills_missing_optionals_and_rejects_missing_required():
    features = [
        F("a", "int"),
        F("b", "float", required=False, default=[0.5]),
        F("c", "string", required=False),
        F("d", "string", source="s2", field="other name"),
    ]
    v = Validator(features, ["s1", "s2"])
    record = {"s1": {"a": "1", "b": None}, "s2": {"other name": "z", "a": "9"}}
    assert v.validate(record) == [[1], [0.5], [], [b"z"]]
    with pytest.raises(RecordError, match="^a: missing required value$"):
        v.validate({"s1": {"a": None}, "s2": {"other name": "z"}})
    with pytest.raises(RecordError, match="^d: missing required value$"):
        v.validate({"s1": {"a": "1", "d": "not from s2"}})


def test_validator_takes_a_feature_from_the_first_source_that_has_it():
    v = Validator([F("a", "int")], ["s1", "s2"])
    assert v.validate({"s1": {"a": None}, "s2": {"a": 5}}) == [[5]]
    assert v.validate({"s1": {"a": 1}, "s2": {"a": 5}}) == [[1]]
