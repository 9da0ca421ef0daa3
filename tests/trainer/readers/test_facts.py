"""The label's classes, the vocabularies and the moments, from the manifest and facts.json (or
statistics.json, for a dataset written without facts) by the trainer's rules; string columns
looked up as ids over whole batches."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tests.trainer.datasets import make_rows, to_example
from trainer.dataset.facts import DatasetFacts, MeanStd
from trainer.dataset.manifest import InputFeature, Manifest
from trainer.readers.decode import Decoder, ExampleError
from trainer.readers.stream import Reader
from transforms.contract import manifest as contract
from transforms.contract.manifest import ManifestFeature
from transforms.contract.statistics import Statistics

FEATURES = {
    "sex": ManifestFeature("string", (), required=False),
    "island": ManifestFeature("string", (), values=("Biscoe", "Dream", "Torgersen")),
    "flipper_mm": ManifestFeature("float"),
    "species": ManifestFeature("string"),
}


def _stats(counts: dict) -> Statistics:
    def feature(kind, **fields):
        base = {"type": kind, "records": 10, "missing": 0, "missing_rate": 0.0, "values": 10}
        if kind == "string":
            base.update(distinct=len(fields.get("counts", [])), distinct_exact=True, top=[])
        return {**base, **fields}

    raw = {
        "format_version": 1,
        "splits": {
            "train": {
                "records": 10,
                "features": {
                    "sex": feature("string", counts=counts),
                    "flipper_mm": feature("float", mean=200.0, std=12.5),
                    "species": feature("string", counts=[
                        {"value": "Gentoo", "count": 4}, {"value": "Adelie", "count": 6}
                    ]),
                },
            }
        },
    }  # fmt: skip
    return Statistics.from_json(raw)


def _dataset() -> Manifest:
    written = contract.Manifest("d", FEATURES, {}, compression="none", label="species")
    features = {n: InputFeature(name=n, **vars(f)) for n, f in FEATURES.items()}
    return Manifest(root="/d", written=written, features=features, splits={})


def test_without_facts_vocabularies_classes_and_moments_come_from_the_statistics():
    counts = [{"value": "male", "count": 3}, {"value": "female", "count": 5},
              {"value": "", "count": 2}]  # fmt: skip
    info = DatasetFacts.of(_dataset(), facts=(), statistics=_stats(counts))
    assert info.classes == ("Adelie", "Gentoo")  # sorted train values
    assert info.vocabularies == {"sex": ("female", "male"), "island": FEATURES["island"].values}
    assert info.number_moments == {"flipper_mm": MeanStd(200.0, 12.5)}


def test_without_statistics_only_declared_values_are_known():
    info = DatasetFacts.of(_dataset(), facts=())
    assert info.classes is None and info.number_moments == {}
    assert list(info.vocabularies) == ["island"]


def _records(rows: list[dict]) -> list[bytes]:
    spec = {n: {"type": f.type, "shape": list(f.shape)} for n, f in FEATURES.items()}
    return [to_example(r, spec).SerializeToString() for r in rows]


def test_strings_become_ids_and_the_label_its_class_index():
    info = DatasetFacts.of(_dataset(), facts=(), statistics=_stats([{"value": "male", "count": 1}]))
    rows = [dict(r, species=s) for r, s in zip(make_rows(4), ["Adelie", "Gentoo"] * 2)]
    rows[1]["sex"], rows[2]["sex"], rows[3]["sex"] = None, "male", "unknown"
    batch = Decoder(FEATURES, info)(_records(rows))
    assert batch["species"].tolist() == [0, 1, 0, 1]
    assert rows[0]["sex"] is None  # make_rows leaves every 7th one out
    assert batch["sex"].tolist() == [0, 0, 1, 0]  # missing, missing, male, not in the vocabulary
    islands = [FEATURES["island"].values.index(r["island"]) + 1 for r in rows]
    assert batch["island"].tolist() == islands and batch["island"].dtype == np.int64
    raw = Decoder(FEATURES, info, encode=False)(_records(rows))
    assert raw["sex"].tolist() == [(r["sex"] or "").encode() for r in rows]


def test_a_label_outside_its_classes_is_an_error_naming_it():
    info = DatasetFacts.of(_dataset(), facts=(), statistics=_stats([]))
    rows = [dict(make_rows(1)[0], species="Chinstrap")]
    with pytest.raises(ExampleError, match="label 'species': b'Chinstrap' is not one of"):
        Decoder(FEATURES, info)(_records(rows))


def test_a_missing_value_of_a_required_feature_is_an_error_naming_it():
    rows = [dict(r, species="Adelie") for r in make_rows(3)]
    rows[1]["flipper_mm"] = None
    with pytest.raises(ExampleError, match="feature 'flipper_mm': record 1 of the batch holds 0"):
        Decoder(FEATURES)(_records(rows))


def test_shards_holding_another_type_than_the_manifest_declares_name_the_split(dataset, tmp_path):
    root = tmp_path / "edited"
    shutil.copytree(dataset.root, root)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["features"]["year"] = {"type": "float", "shape": [], "required": True}
    (root / "manifest.json").write_text(json.dumps(manifest))
    reader = Reader(str(root), "eval", 16)
    with pytest.raises(ExampleError) as e:
        next(reader.batches(reader.layout(), 0))
    assert str(e.value).startswith(f"{root}: split 'eval': a record cannot be decoded")
    assert 'expected float_list, found int64_list for feature "year"' in str(e.value)


def test_a_lookup_gives_each_value_its_index_and_minus_one_to_others():
    import pyarrow as pa

    from trainer.readers.decode import looked_up

    words = pa.array([b"b", b"x", b"a", b"b"], pa.large_binary())
    assert looked_up({b"a": 0, b"b": 1}, words).tolist() == [1, -1, 0, 1]
    assert looked_up({1: 0, 3: 1}, pa.array([3, 1, 3, 7])).tolist() == [1, 0, 1, -1]
    with_null = pa.array([b"a", None], pa.large_binary())
    assert looked_up({b"a": 0}, with_null).tolist() == [0, -1]
    assert looked_up({b"a": 0}, pa.array([], pa.large_binary())).tolist() == []
