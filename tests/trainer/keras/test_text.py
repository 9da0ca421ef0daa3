"""Free text (`--text-features`): a scalar string split into words on the host, its words'
vocabulary counted on train, their embeddings averaged on the device."""

from __future__ import annotations

import hashlib
import json
import random

import numpy as np
import pytest
import tensorflow as tf

from trainer.config import ModelConfig
from trainer.dataset.manifest import ManifestError, load_manifest
from trainer.keras.inputs import Inputs
from trainer.keras.preprocess import HostPreprocessing
from trainer.recipe.rules import with_text
from trainer.recipe.words import FROM_VOCABULARY, TOKENS, words
from trainer.task import main as train

COLOURS = {"red": "Adelie", "blue": "Chinstrap", "green": "Gentoo"}
FILLER = "the a bird was seen near rocks today calm loud small big at dawn dusk by shore".split()


def _note(rng: random.Random, colour: str, i: int) -> str:
    """Unique text holding the class's colour word among filler words: its whole string never
    repeats, only its words carry the class."""
    words_ = rng.sample(FILLER, 5) + [colour.upper() if i % 2 else colour + ","]
    rng.shuffle(words_)
    return " ".join(words_) + f" (note {i})"


def _write(root, n=360, seed=3):
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        colour = rng.choice(sorted(COLOURS))
        rows.append({"note": _note(rng, colour, i), "species": COLOURS[colour], "size": [i % 7]})
    features = {
        "note": {"type": "string", "shape": [], "required": False},
        "size": {"type": "int", "shape": [], "required": True},
        "species": {"type": "string", "shape": [], "required": True,
                    "values": sorted(set(COLOURS.values()))},
    }  # fmt: skip
    splits, cut = {}, n * 3 // 4
    for split, part in (("train", rows[:cut]), ("eval", rows[cut:])):
        (root / split).mkdir(parents=True)
        rel = f"{split}/{split}-00000-of-00001.tfrecord"
        with tf.io.TFRecordWriter(str(root / rel)) as writer:
            for row in part:
                f = {
                    "note": tf.train.Feature(
                        bytes_list=tf.train.BytesList(value=[row["note"].encode()])
                    ),
                    "size": tf.train.Feature(int64_list=tf.train.Int64List(value=row["size"])),
                    "species": tf.train.Feature(
                        bytes_list=tf.train.BytesList(value=[row["species"].encode()])
                    ),
                }
                writer.write(
                    tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString()
                )
        data = (root / rel).read_bytes()
        splits[split] = {"records": len(part), "files": [
            {"path": rel, "records": len(part), "bytes": len(data),
             "sha256": hashlib.sha256(data).hexdigest()}]}  # fmt: skip
    manifest = {
        "format_version": 1, "name": "notes", "created": "2026-11-27T10:00:00Z",
        "config_sha256": "0" * 64, "compression": "none", "features": features,
        "label": "species", "sources": {"notes": {"format": "jsonl", "records": n}},
        "splits": splits, "rejected": {"records": 0, "reasons": {}}, "duplicates": 0,
        "transform": None,
    }  # fmt: skip
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


@pytest.fixture(scope="module")
def notes(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("notes"))


def test_words_are_lower_cased_and_split_at_anything_but_letters_and_digits():
    got = words(tf.constant(['Calm, easy; says "N14A2"!', "", "Don't  STOP Ünïcode"])).to_list()
    assert got == [
        [b"calm", b"easy", b"says", b"n14a2"],
        [],
        [b"don", b"t", b"stop", "ünïcode".encode()],
    ]


def test_a_text_feature_gets_a_vocabulary_of_its_train_words(notes):
    inputs = Inputs.of(load_manifest(str(notes)), model=ModelConfig(text_features=("note",)))
    (tokens,) = [i for i in inputs.recipe.inputs if i.name == "note"]
    assert tokens.feature.text and {"red", "blue", "green", "the", "note"} <= set(tokens.vocabulary)
    assert (tokens.kind, tokens.ids, tokens.shape, tokens.padding) == (
        TOKENS,
        FROM_VOCABULARY,
        (None,),
        0,
    )
    host = HostPreprocessing([tokens])
    ids = host({"note": tf.constant(["Red bird", "", "zzz unknown"])})["note"].numpy()
    vocabulary = ["", "[UNK]", *tokens.vocabulary]
    assert ids.dtype == np.int32 and ids.shape == (3, 2)
    assert [vocabulary[i] for i in ids[0]] == ["red", "bird"]
    assert ids[1].tolist() == [0, 0] and ids[2].tolist() == [1, 1]  # padding; unknown words


@pytest.mark.parametrize(
    "names, message",
    [
        (("nope",), "--text-features: no feature 'nope' (features: note, size, species)"),
        (("species",), "--text-features: 'species' is the label"),
        (("size",), "--text-features: 'size' is int; free text is a scalar string without values"),
    ],
)
def test_text_features_must_be_scalar_strings(notes, names, message):
    with pytest.raises(ManifestError) as e:
        with_text(load_manifest(str(notes)), names)
    assert str(e.value) == message


@pytest.mark.slow
def test_the_model_learns_from_the_words_where_the_whole_string_says_nothing(notes, tmp_path):
    accuracy = {}
    # a unique note is left out by default (nearly unique per record); as one category it can
    # only be taken with --include-features
    runs = (("words", ["--text-features", "note"]), ("whole", ["--include-features", "note"]))
    for name, extra in runs:
        model_dir = tmp_path / name
        code = train(
            ["--data", str(notes), "--model-dir", str(model_dir), "--epochs", "12",
             "--batch-size", "32", "--deterministic", "--exclude-features", "size", *extra]
        )  # fmt: skip
        assert code == 0
        metrics = json.loads((model_dir / "metrics.json").read_text())
        accuracy[name] = metrics["eval"]["accuracy"]
    # every note is unique: as one category it tells nothing about unseen notes
    assert accuracy["words"] > 0.9 and accuracy["whole"] < 0.6, accuracy
    # the export splits served raw text into words the same way
    served = tf.saved_model.load(str(tmp_path / "words" / "export")).signatures["serving_default"]
    example = tf.train.Example(features=tf.train.Features(feature={
        "note": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"a GREEN bird at dusk"])),
    }))  # fmt: skip
    out = served(examples=tf.constant([example.SerializeToString()]))
    assert out["classes"].numpy()[0] == b"Gentoo"
