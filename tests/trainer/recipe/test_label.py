"""A string label without `values` takes its classes from the data (trainer/recipe/rules.py, from
the facts of trainer/recipe/facts.py), and a string list its vocabulary."""

from __future__ import annotations

import json
import shutil

import pytest
import tensorflow as tf

from tests.trainer.datasets import make_rows, run_python, write_dataset
from trainer.dataset.manifest import ManifestError, load_manifest
from trainer.recipe.facts import RECORDS, STATISTICS, gather, label_counts
from trainer.recipe.label import CONFIG, with_classes
from transforms.contract.layout import STATISTICS as STATISTICS_FILE
from transforms.contract.layout import STATISTICS_FORMAT_VERSION
from transforms.contract.statistics import Statistics

SPECIES = ["Adelie", "Chinstrap", "Gentoo"]


def _without_values(root):
    """The dataset at `root` with its label's `values` removed from the manifest."""
    path = root / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["features"]["species"]["values"]
    path.write_text(json.dumps(manifest))
    return root


@pytest.fixture
def unlisted(dataset, tmp_path):
    root = tmp_path / "unlisted"
    shutil.copytree(dataset.root, root)
    return _without_values(root)


def _statistics(root, train_top, distinct=None, exact=True):
    """Writes a statistics.json at `root` whose train split lists `train_top` ((value, count))
    as the label's top values, its other fields consistent with them."""
    records = sum(n for _, n in train_top)
    lengths = [len(v) for v, _ in train_top]
    species = {
        "type": "string",
        "records": records,
        "missing": 0,
        "missing_rate": 0.0,
        "values": records,
        "distinct": len(train_top) if distinct is None else distinct,
        "distinct_exact": exact,
        "top": [{"value": v, "count": n} for v, n in train_top],
        "length": {
            "min": min(lengths),
            "max": max(lengths),
            "mean": sum(len(v) * n for v, n in train_top) / records,
        },
    }
    stats = Statistics.from_json(
        {
            "format_version": STATISTICS_FORMAT_VERSION,
            "splits": {"train": {"records": records, "features": {"species": species}}},
        }
    )
    (root / STATISTICS_FILE).write_text(stats.dumps())


def with_label_classes(m):
    return with_classes(m, gather(m))


def _true_counts(dataset, split):
    rows = dataset.rows[split]
    return {s: sum(r["species"] == s for r in rows) for s in {r["species"] for r in rows}}


def test_classes_come_from_the_train_records_when_there_are_no_statistics(dataset, unlisted):
    m, source = with_label_classes(load_manifest(str(unlisted)))
    assert source == RECORDS
    assert m.features["species"].values == tuple(SPECIES)  # sorted
    assert label_counts(m, "train", None) == (_true_counts(dataset, "train"), RECORDS)


def test_classes_come_from_the_statistics_when_they_list_every_value(dataset, unlisted):
    # the statistics are believed: a class only they name shows they were read
    _statistics(unlisted, [("Gentoo", 5), ("Adelie", 3), ("Chinstrap", 2), ("Zzz", 1)])
    m, source = with_label_classes(load_manifest(str(unlisted)))
    assert source == STATISTICS
    assert m.features["species"].values == (*SPECIES, "Zzz")


@pytest.mark.parametrize("distinct, exact", [(25, True), (4, False)])
def test_incomplete_statistics_fall_back_to_the_records(dataset, unlisted, distinct, exact):
    _statistics(unlisted, [("Zzz", 9), ("Adelie", 3)], distinct=distinct, exact=exact)
    m, source = with_label_classes(load_manifest(str(unlisted)))
    assert (source, m.features["species"].values) == (RECORDS, tuple(SPECIES))


def test_a_label_with_values_or_a_numeric_label_is_left_as_it_is(dataset, tmp_path):
    m = load_manifest(str(dataset.root))
    assert with_label_classes(m) == (m, CONFIG)
    numeric = write_dataset(tmp_path / "numeric", make_rows(40), label="flipper_mm")
    m = load_manifest(str(numeric.root))
    assert with_label_classes(m) == (m, None)


def test_a_class_only_eval_holds_is_an_error_naming_it(tmp_path):
    rows = make_rows(100)
    for row in rows[80:]:  # eval: the last 20%
        row["species"] = "Macaroni"
    root = _without_values(write_dataset(tmp_path / "d", rows).root)
    with pytest.raises(ManifestError) as e:
        with_label_classes(load_manifest(str(root)))
    assert str(e.value).startswith(
        "label 'species': split 'eval' holds 'Macaroni' (20 records), which the train split "
        "does not: the model cannot learn a class it never sees"
    )


@pytest.mark.slow
def test_training_on_a_label_without_values_records_its_classes(unlisted, tmp_path):
    model_dir = tmp_path / "model"
    proc = run_python(
        "-m", "trainer.task", "--data", str(unlisted), "--model-dir", str(model_dir),
        "--epochs", "1", "--batch-size", "32",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    metrics = json.loads((model_dir / "metrics.json").read_text())
    assert (metrics["classes"], metrics["classes_from"]) == (SPECIES, RECORDS)
    assert "3 classes from the train split's records" in proc.stderr


def test_a_string_list_gets_the_most_frequent_train_tokens_as_its_vocabulary(dataset):
    from collections import Counter

    from trainer.config import ModelConfig
    from trainer.keras.inputs import Inputs
    from trainer.keras.preprocess import HostPreprocessing
    from trainer.recipe.words import FROM_HASH, FROM_VOCABULARY

    m = load_manifest(str(dataset.root))
    counts = Counter(t for r in dataset.rows["train"] for t in r["tags"])
    expected = sorted(counts, key=lambda t: (-counts[t], t))

    def tags(size: int):
        recipe = Inputs.of(m, model=ModelConfig(vocabulary_size=size)).recipe
        return next(i for i in recipe.inputs if i.name == "tags")

    assert tags(10_000).vocabulary == tuple(expected)
    two = tags(2)
    assert two.vocabulary == tuple(expected[:2])
    assert (two.ids, two.vocabulary_size, two.padding) == (FROM_VOCABULARY, 4, 0)
    assert tags(0).ids == FROM_HASH  # hashed, as before

    host = HostPreprocessing([two])
    ids = host({"tags": tf.constant([[expected[0], expected[1]], [expected[2], ""]])})["tags"]
    assert ids.numpy().tolist() == [[2, 3], [1, 0]]  # 1: not kept, 0: padding
