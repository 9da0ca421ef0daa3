"""The schema inferred from the config and the statistics: exact, read back equal, and a bad
schema.pbtxt named by file and line."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pyarrow as pa
import pytest
from tensorflow_metadata.proto.v0 import schema_pb2

from tests.transforms.validation.typed import typed
from transforms.contract.config import FeatureSpec
from transforms.contract.layout import SCHEMA
from transforms.contract.manifest import Manifest, ManifestFeature
from transforms.contract.statistics import Statistics
from transforms.stats import chunk_stats
from transforms.validation.schema import (
    SchemaError,
    carry_over,
    infer_schema,
    read_schema,
    schema_text,
)

ROWS = 400
FEATURES = {
    "age": ManifestFeature("int", (), True, min=0.5, max=120.7),
    "count": ManifestFeature("int", (), False, values=(3, 1, 2), min=2),
    "score": ManifestFeature("float", (), False, default=0.0),
    "ratio": ManifestFeature("float", (), False, min=-1.5, max=2.25),
    "weights": ManifestFeature("float", (3,), True),
    "pair": ManifestFeature("int", (2,), False),
    "tags": ManifestFeature("string", (None,), False),
    "labels": ManifestFeature("string", (None,), True),
    "species": ManifestFeature("string", (), True, values=("Gentoo", "Adelie", "Chinstrap")),
    "island": ManifestFeature("string", (), False),
    "name": ManifestFeature("string", (), True),
    "comment": ManifestFeature("string", (), False),
    "never": ManifestFeature("string", (), False),
    "blob": ManifestFeature("bytes", (), False),
    "photo": ManifestFeature("image", (), True, image_size=(8, 8, 3)),
}


def _column(values: list, kind: pa.DataType) -> pa.ListArray:
    return pa.array(
        [[] if v is None else (v if isinstance(v, list) else [v]) for v in values], pa.list_(kind)
    )


def _text(values: list) -> pa.ListArray:
    encode = lambda v: [x.encode() for x in v] if isinstance(v, list) else v.encode()  # noqa: E731
    return _column([None if v is None else encode(v) for v in values], pa.binary())


@pytest.fixture(scope="module")
def statistics() -> Statistics:
    """statistics.json of records of FEATURES (train, eval), by `transforms.stats`, written
    and read back."""
    rng = random.Random(5)
    split = np.array([0 if i % 4 else 1 for i in range(ROWS)], np.int16)
    islands = ["Biscoe", "Dream", "Torgersen"]
    raw = {
        "age": _column([rng.randrange(1, 100) for _ in range(ROWS)], pa.int64()),
        "count": _column([rng.choice([2, 3, None]) for _ in range(ROWS)], pa.int64()),
        "score": _column([rng.uniform(0, 1) for _ in range(ROWS)], pa.float32()),
        "ratio": _column([rng.choice([-1.5, 0.5, None]) for _ in range(ROWS)], pa.float32()),
        "weights": _column([[0.25, 0.5, 1.0]] * ROWS, pa.float32()),
        "pair": _column([rng.choice([[1, 2], None]) for _ in range(ROWS)], pa.int64()),
        "tags": _text([rng.choice([["a"], ["b", "c"], None]) for _ in range(ROWS)]),
        "labels": _text([["x"] * rng.randrange(1, 3) for _ in range(ROWS)]),
        "species": _text([rng.choice(["Adelie", "Gentoo"]) for _ in range(ROWS)]),
        # eval has a fourth island: the domain comes from train only
        "island": _text([rng.choice(islands + [None]) if s == 0 else "Other" for s in split]),
        "name": _text([f"n{i % 150}" for i in range(ROWS)]),  # too many for a domain
        "comment": _text([rng.choice(["long " * 50, "longer " * 50]) for _ in range(ROWS)]),
        "never": _text([None] * ROWS),
        "blob": _column([rng.choice([b"\x00\x01", None]) for _ in range(ROWS)], pa.binary()),
        "photo": _column([b"\x89PNG" + bytes(rng.randrange(40)) for _ in range(ROWS)], pa.binary()),
    }  # fmt: skip
    names = list(FEATURES)
    stats = chunk_stats(names, [FEATURES[n].type for n in names], [raw[n] for n in names], split)
    return Statistics.loads(stats.result(["train", "eval"]).dumps())  # as statistics.json reads


EXPECTED = """\
feature {
  name: "age"
  type: INT
  int_domain {
    min: 1
    max: 120
  }
  presence {
    min_fraction: 1.0
    min_count: 1
  }
  shape {
  }
}
feature {
  name: "count"
  value_count {
    min: 0
    max: 1
  }
  type: INT
  int_domain {
    min: 2
    max: 3
    is_categorical: true
  }
  presence {
    min_count: 0
  }
}
feature {
  name: "score"
  value_count {
    min: 0
    max: 1
  }
  type: FLOAT
  float_domain {
    disallow_nan: true
  }
  presence {
    min_count: 0
  }
}
feature {
  name: "ratio"
  value_count {
    min: 0
    max: 1
  }
  type: FLOAT
  float_domain {
    min: -1.5
    max: 2.25
    disallow_nan: true
  }
  presence {
    min_count: 0
  }
}
feature {
  name: "weights"
  type: FLOAT
  float_domain {
    disallow_nan: true
  }
  presence {
    min_fraction: 1.0
    min_count: 1
  }
  shape {
    dim {
      size: 3
    }
  }
}
feature {
  name: "pair"
  value_count {
    min: 0
    max: 2
  }
  type: INT
  presence {
    min_count: 0
  }
}
feature {
  name: "tags"
  value_count {
    min: 0
  }
  type: BYTES
  domain: "tags"
  presence {
    min_count: 0
  }
}
feature {
  name: "labels"
  value_count {
    min: 0
  }
  type: BYTES
  domain: "labels"
  presence {
    min_count: 0
  }
}
feature {
  name: "species"
  type: BYTES
  domain: "species"
  presence {
    min_fraction: 1.0
    min_count: 1
  }
  shape {
  }
}
feature {
  name: "island"
  value_count {
    min: 0
    max: 1
  }
  type: BYTES
  domain: "island"
  presence {
    min_count: 0
  }
}
feature {
  name: "name"
  type: BYTES
  presence {
    min_fraction: 1.0
    min_count: 1
  }
  shape {
  }
}
feature {
  name: "comment"
  value_count {
    min: 0
    max: 1
  }
  type: BYTES
  presence {
    min_count: 0
  }
}
feature {
  name: "never"
  value_count {
    min: 0
    max: 1
  }
  type: BYTES
  presence {
    min_count: 0
  }
}
feature {
  name: "blob"
  value_count {
    min: 0
    max: 1
  }
  type: BYTES
  presence {
    min_count: 0
  }
}
feature {
  name: "photo"
  type: BYTES
  presence {
    min_fraction: 1.0
    min_count: 1
  }
  shape {
  }
  image_domain {
  }
}
string_domain {
  name: "tags"
  value: "a"
  value: "b"
  value: "c"
}
string_domain {
  name: "labels"
  value: "x"
}
string_domain {
  name: "species"
  value: "Gentoo"
  value: "Adelie"
  value: "Chinstrap"
}
string_domain {
  name: "island"
  value: "Biscoe"
  value: "Dream"
  value: "Torgersen"
}
"""


def test_the_schema_follows_the_config_and_fills_in_string_domains_from_train(statistics):
    manifest = Manifest(name="penguins", features=FEATURES, splits={})
    schema = infer_schema(statistics, manifest)
    assert schema_text(schema) == EXPECTED
    assert infer_schema(statistics, FEATURES) == schema


def test_the_validated_config_gives_the_same_schema(statistics):
    specs = tuple(
        FeatureSpec(
            name,
            f.type,
            f.shape,
            f.required,
            default=None if f.default is None else (f.default,),
            values=f.values,
            min=f.min,
            max=f.max,
            image_size=f.image_size,
        )
        for name, f in FEATURES.items()
    )
    assert schema_text(infer_schema(statistics, specs)) == EXPECTED


def test_the_reference_split_can_be_named_and_string_domains_bounded(statistics):
    eval_schema = infer_schema(statistics, FEATURES, split="eval")
    domains = {d.name: list(d.value) for d in eval_schema.string_domain}
    assert domains["island"] == ["Other"]
    without_train = Statistics({"eval": statistics.splits["eval"]})
    assert infer_schema(without_train, FEATURES) == eval_schema
    bounded = infer_schema(statistics, FEATURES, max_string_domain_size=2)
    assert [d.name for d in bounded.string_domain] == ["labels", "species"]  # config's: kept
    assert [f.name for f in bounded.feature if f.HasField("domain")] == ["labels", "species"]
    with pytest.raises(ValueError, match="split 'test' is not in the statistics"):
        infer_schema(statistics, FEATURES, split="test")


def test_a_complete_top_gives_a_domain_where_statistics_have_no_counts(statistics):
    """statistics.json lists every value's count up to 1,000 distinct values (`counts`);
    without them, a domain comes from `top` when it holds every value."""
    train = statistics.splits["train"]
    island = dataclasses.replace(train.features["island"], counts=None)
    name = dataclasses.replace(train.features["name"], counts=None)
    assert island.distinct == len(island.top) == 3 and name.distinct > len(name.top)
    features = {**train.features, "island": island, "name": name}
    bare = Statistics({"train": dataclasses.replace(train, features=features)})
    for bound in (100, 150):  # `name` has 150 values, not all in `top`: never a domain
        schema = infer_schema(bare, FEATURES, max_string_domain_size=bound)
        domains = {d.name: list(d.value) for d in schema.string_domain}
        assert domains["island"] == ["Biscoe", "Dream", "Torgersen"] and "name" not in domains
    # with every count listed, the bound decides
    wide = infer_schema(statistics, FEATURES, max_string_domain_size=150)
    assert [(d.name, len(d.value)) for d in wide.string_domain if d.name == "name"] == [
        ("name", 150)
    ]


def test_features_without_statistics_take_the_config_alone():
    schema = infer_schema(Statistics.from_json({"format_version": 1, "splits": {}}), FEATURES)
    by_name = {f.name: f for f in schema.feature}
    assert list(by_name) == list(FEATURES)
    assert (by_name["age"].presence.min_count, by_name["island"].presence.min_count) == (1, 0)
    assert [d.name for d in schema.string_domain] == ["species"]


def test_a_type_that_differs_from_the_statistics_is_refused(statistics):
    changed = {**FEATURES, "age": ManifestFeature("float", (), True)}
    with pytest.raises(ValueError, match="feature 'age' is float in the config but int"):
        infer_schema(statistics, changed)


def test_schema_text_reads_back_equal_from_a_file_and_from_text(statistics, tmp_path):
    schema = infer_schema(statistics, FEATURES)
    schema.string_domain.add(name="cities", value=["東京", 'say "hi"'])
    path = tmp_path / SCHEMA
    path.write_text(schema_text(schema), encoding="utf-8")
    assert read_schema(path) == schema
    assert read_schema(str(path)) == schema
    assert read_schema(schema_text(schema)) == schema
    assert read_schema(schema_text(schema).encode()) == schema
    assert "東京" in schema_text(schema)
    assert read_schema("") == schema_pb2.Schema()


def test_a_bad_schema_file_is_named_with_its_line(tmp_path):
    path = tmp_path / SCHEMA
    path.write_text('feature {\n  name: "age"\n  nme: "x"\n}\n')
    with pytest.raises(SchemaError) as e:
        read_schema(path)
    assert str(e.value) == (
        f'{path}:3:3: Message type "tensorflow.metadata.v0.Feature" has no field named "nme".'
    )
    path.write_text('feature {\n  name: "age"\n  type: TEXT\n}\n')
    with pytest.raises(SchemaError, match=rf"^{path}:3:\d+: .*TEXT") as e:
        read_schema(path)
    assert "\n" not in str(e.value)
    with pytest.raises(SchemaError) as e:
        read_schema('feature {\n  name: "age"\n')
    assert str(e.value) == '<schema text>:2:9: Expected "}".'


def test_a_schema_that_breaks_its_own_references_is_refused(tmp_path):
    path = tmp_path / SCHEMA
    cases = {
        'feature { name: "s" type: BYTES domain: "colours" }': (
            "feature 's': domain 'colours' names no string_domain of the schema"
        ),
        'feature { name: "a" } feature { name: "a" }': "feature 'a' is defined twice",
        "feature { type: INT }": "feature 1 has no name",
        'string_domain { name: "d" } string_domain { name: "d" }': (
            "string_domain 'd' is defined twice"
        ),
    }
    for text, message in cases.items():
        path.write_text(text)
        with pytest.raises(SchemaError) as e:
            read_schema(path)
        assert str(e.value) == f"{path}: {message}"
    with pytest.raises(SchemaError) as e:
        read_schema(tmp_path / "missing.pbtxt")
    assert str(e.value) == f"{tmp_path / 'missing.pbtxt'}: No such file or directory"
    assert issubclass(SchemaError, ValueError)


def test_a_baseline_schema_carries_its_data_domains_and_the_config_stays_the_schema():
    before = {
        "island": ManifestFeature("string"),
        "year": ManifestFeature("int", min=2000, max=2010),
        "gone": ManifestFeature("string"),
    }
    island = {
        "type": "string", "records": 3, "missing": 0, "values": 3, "distinct": 2,
        "distinct_exact": True, "length": {"min": 5, "max": 6, "mean": 5.5}, "top": [],
        "counts": [{"value": "Biscoe", "count": 2}, {"value": "Dream", "count": 1}],
    }  # fmt: skip
    stats = {"splits": {"train": {"records": 3, "features": {"island": island}}}}
    previous = infer_schema(typed(stats), before)
    assert [list(d.value) for d in previous.string_domain] == [["Biscoe", "Dream"]]
    now = {
        # its values now: Torgersen too, which the carried domain will report
        "island": ManifestFeature("string"),
        "year": ManifestFeature("float", required=False, max=2030.0),  # retyped, wider
        "new": ManifestFeature("string", values=("a", "b")),
    }
    stats["splits"]["train"]["features"]["island"]["counts"].append(
        {"value": "Torgersen", "count": 1}
    )
    checked, published = carry_over(infer_schema(typed(stats), now), previous, now)
    by_name = {f.name: f for f in published.feature}
    assert list(by_name) == ["island", "year", "new"]  # the config's features
    domains = {d.name: list(d.value) for d in published.string_domain}
    assert domains == {"island": ["Biscoe", "Dream"], "new": ["a", "b"]}  # island's carried
    assert by_name["year"].type == schema_pb2.FLOAT and by_name["year"].float_domain.max == 2030
    assert by_name["year"].presence.min_count == 0  # made optional: no longer required
    # checked: also the feature the config dropped, and year's previous type
    check = {f.name: f for f in checked.feature}
    assert list(check) == ["island", "year", "new", "gone"]
    assert check["year"].type == schema_pb2.INT and check["gone"].type == schema_pb2.BYTES
    assert not check["gone"].HasField("domain")
