"""`pipelines.examples.encode_files`: a few files read, validated and encoded in this process
exactly as `shardflow etl` reads, validates and encodes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tensorflow as tf
import yaml

from pipelines import etl
from pipelines.config.loader import load_config
from pipelines.examples import Examples, encode_files
from transforms.records import Rejected

CSV = (
    "id,species,bill,tags\n"
    "1,Adelie,38.5,a;b\n"
    "2,Gentoo,x,\n"  # bill: not a number
    '3,Chinstrap,47.0,"c"\n'
    ",Adelie,40.0,a\n"  # no key
    "5,Emperor,41.0,a\n"  # not one of the allowed values
    '6,Gentoo,"50.5",b;c;d\n'
    "7,Adelie,\n"  # a field short
)
CONFIG = {
    "name": "few",
    "sources": [{"name": "birds", "format": "csv", "path": "birds.csv"}],
    "key": "id",
    "features": {
        "id": {"type": "int"},
        "species": {"type": "string", "values": ["Adelie", "Chinstrap", "Gentoo"]},
        "bill": {"type": "float", "required": False},
        "tags": {"type": "string", "shape": [None], "required": False},
    },
    "label": "species",
    "splits": {"train": 0.5, "eval": 0.5},
    # 4 of 7 records rejected: the point
    "output": {"path": "out", "compression": "none", "max_rejected_fraction": 1},
}


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """(config path, the dataset the ETL wrote from birds.csv)."""
    base = tmp_path_factory.mktemp("few")
    (base / "birds.csv").write_text(CSV)
    (base / "few.yaml").write_text(yaml.safe_dump(CONFIG))
    assert etl.run(["--config", str(base / "few.yaml")]) == 0
    return base / "few.yaml", base / "out"


def _encoded(config_path):
    dataset = load_config(str(config_path))
    source = dataset.sources[0]
    items = list(encode_files(dataset, source, [source.path]))
    return [i for i in items if isinstance(i, Examples)], [
        i for i in items if isinstance(i, Rejected)
    ]


def test_the_examples_are_the_bytes_the_etl_wrote(published):
    config_path, out = published
    examples, _ = _encoded(config_path)
    manifest = json.loads((out / "manifest.json").read_text())
    written = sorted(
        record.numpy()
        for split in manifest["splits"].values()
        for f in split["files"]
        for record in tf.data.TFRecordDataset(str(out / f["path"]))
    )
    assert sorted(s for e in examples for s in e.serialized) == written
    assert len(written) == 3


def test_keys_and_locations_follow_the_input_order(published):
    config_path, _ = published
    examples, _ = _encoded(config_path)
    path = str(config_path.parent / "birds.csv")
    assert [k for e in examples for k in e.keys] == ["1", "3", "6"]
    assert [w for e in examples for w in e.locations] == [f"{path}:2", f"{path}:4", f"{path}:7"]


def test_the_rejected_records_are_those_of_the_dataset(published):
    config_path, out = published
    _, rejected = _encoded(config_path)
    written = [
        json.loads(line)
        for f in sorted((out / "rejected").iterdir())
        for line in f.read_text().splitlines()
    ]
    key = lambda r: r["location"]  # noqa: E731
    assert sorted((r.to_json() for r in rejected), key=key) == sorted(written, key=key)
    assert sorted(r.reason for r in rejected) == [
        "bill: not a number",
        "csv: expected 4 fields, got 3",
        "id: missing key",
        "species: not one of the allowed values [Adelie, Chinstrap, Gentoo]",
    ]


def test_without_a_key_a_record_is_known_by_its_location(published, tmp_path):
    config_path, _ = published
    config = dict(CONFIG, key=None)
    (tmp_path / "birds.csv").write_text(CSV)
    (tmp_path / "few.yaml").write_text(yaml.safe_dump({k: v for k, v in config.items() if v}))
    examples, rejected = _encoded(tmp_path / "few.yaml")
    locations = [w for e in examples for w in e.locations]
    assert [k for e in examples for k in e.keys] == locations
    assert locations == [f"{tmp_path / 'birds.csv'}:{line}" for line in (2, 4, 7)]
    # the record without an id is rejected by the feature's rule now, not the key's
    assert "id: missing required value" in [r.reason for r in rejected]


def test_validate_only_reads_a_sample_of_each_source_and_writes_nothing(published, capsys):
    config_path, out = published
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    assert etl.run(["--config", str(config_path), "--output", str(out), "--overwrite",
                    "--validate-only"]) == 0  # fmt: skip
    path = config_path.parent / "birds.csv"
    assert capsys.readouterr().out.splitlines() == [
        "shardflow etl: few: config valid; 1 input file(s)",
        "  birds (csv): 7 records sampled from the start: 3 valid, 4 rejected",
        f"    csv: expected 4 fields, got 3: 1 (first at {path}:8)",
        f"    id: missing key: 1 (first at {path}:5)",
        f"    bill: not a number: 1 (first at {path}:3)",
        f"    species: not one of the allowed values [Adelie, Chinstrap, Gentoo]: 1 (first at "
        f"{path}:6)",
    ]
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_a_sample_stops_at_its_limit():
    dataset = load_config(str(Path(__file__).parents[2] / "examples/penguins/penguins.yaml"))
    measurements = dataset.sources[0]
    items = list(encode_files(dataset, measurements, [measurements.path], limit=50))
    read = sum(len(i.keys) if isinstance(i, Examples) else 1 for i in items)
    assert read == 50
