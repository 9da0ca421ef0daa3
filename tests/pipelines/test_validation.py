"""Data validation in the ETL run and in `shardflow validate`, on datasets written for real.

A first run (v1) infers and publishes its schema; a run on changed data (v2: a new species, a
heavier mass, a note missing twice as often) against v1 as its baseline finds each change with
its kind, measure and value; with the default blocking kinds the missing-rate jump fails the
run and nothing is published; a rerun of v1's data against v1 finds nothing and writes the same
statistics.pb and schema.pbtxt bytes. `shardflow validate` recomputes the same anomalies.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml
from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2

from pipelines.config.loader import ConfigError, parse_config
from pipelines.etl import run
from pipelines.validate import main as validate_main
from transforms.contract.manifest import Manifest
from transforms.contract.statistics import Statistics
from transforms.validation.measures import jensen_shannon_divergence

pytestmark = pytest.mark.slow

ROWS = 600
LIMITS = {"drift": {"l_infinity": 0.05, "jensen_shannon": 0.05}, "skew": {"l_infinity": 0.2}}
# note's own: its share of calm and loud moves by chance in a split of ~60 values
NOTE_LIMITS = {"max_missing_rate": 0.3, "drift": {"l_infinity": 0.5}}


def _rows(changed: bool) -> str:
    rng = random.Random(7)
    lines = ["id,species,mass,note"]
    for i in range(ROWS):
        species = rng.choice(["Adelie", "Adelie", "Gentoo", "Chinstrap"])
        if changed and i % 10 == 0:
            species = "Emperor"
        mass = round(rng.gauss(4000 + (800 if changed else 0), 300), 1)
        note = "" if i % (2 if changed else 4) == 0 else rng.choice(["calm", "loud"])
        lines.append(f"{i},{species},{mass},{note}")
    return "\n".join(lines) + "\n"


def _config(folder: Path, name: str, changed: bool, mass: str = "float", **validation) -> Path:
    (folder / f"{name}.csv").write_text(_rows(changed))
    config = {
        "name": "birds",
        "sources": [{"name": "birds", "format": "csv", "path": f"{name}.csv"}],
        "key": "id",
        "features": {
            "id": {"type": "int"},
            "species": {"type": "string"},
            "mass": {"type": mass},
            "note": {"type": "string", "required": False},
        },
        "splits": {"train": 0.8, "eval": 0.2},
        "output": {"path": name},
        "validation": {**LIMITS, "features": {"note": NOTE_LIMITS}, **validation},
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """v1; v2 against v1 (nothing blocks); v2 with the default blocking kinds; v1 again."""
    folder = tmp_path_factory.mktemp("validation")
    v1 = _config(folder, "v1", changed=False)
    assert run(["--config", str(v1)]) == 0
    v2 = _config(folder, "v2", changed=True, block=[])
    assert run(["--config", str(v2), "--baseline", str(folder / "v1")]) == 0
    blocked = _config(folder, "v2b", changed=True)
    code = run(["--config", str(blocked), "--baseline", str(folder / "v1")])
    rerun = _config(folder, "v1again", changed=False, baseline="v1")
    assert run(["--config", str(rerun)]) == 0
    # the same data with mass read as text: its type is not the baseline schema's
    retyped = _config(folder, "v1text", changed=False, mass="string", baseline="v1")
    assert run(["--config", str(retyped)]) == 1
    return folder, code


def _manifest(folder: Path, name: str) -> Manifest:
    return Manifest.from_json((folder / name / "manifest.json").read_text())


def _statistics(folder: Path, name: str) -> dict:
    return json.loads((folder / name / "statistics.json").read_text())["splits"]


def _typed(folder: Path, name: str) -> Statistics:
    path = folder / name / "statistics.json"
    return Statistics.loads(path.read_text(), str(path))


def _shares(feature: dict) -> dict[str, float]:
    counts = {c["value"]: c["count"] for c in feature["counts"]}
    total = sum(counts.values())
    return {v: n / total for v, n in counts.items()}


def test_the_first_run_publishes_its_inferred_schema_and_tfdv_statistics(runs):
    folder, _ = runs
    manifest = _manifest(folder, "v1")
    validation = manifest.validation
    assert (validation.schema_from, validation.baseline, validation.anomalies) == (
        "inferred",
        None,
        (),
    )
    schema = schema_pb2.Schema()
    from google.protobuf import text_format

    text_format.Parse((folder / "v1" / "schema.pbtxt").read_text(), schema)
    features = {f.name: f for f in schema.feature}
    assert set(features) == {"id", "species", "mass", "note"}
    assert features["species"].domain == "species"
    domains = {d.name: sorted(d.value) for d in schema.string_domain}
    assert domains == {"species": ["Adelie", "Chinstrap", "Gentoo"], "note": ["calm", "loud"]}
    assert features["mass"].presence.min_fraction == 1.0
    proto = statistics_pb2.DatasetFeatureStatisticsList.FromString(
        (folder / "v1" / "statistics.pb").read_bytes()
    )
    splits = _statistics(folder, "v1")
    assert [(d.name, d.num_examples) for d in proto.datasets] == [
        (name, splits[name]["records"]) for name in manifest.splits
    ]


def test_each_planted_change_is_found_with_its_measure_and_value(runs):
    folder, _ = runs
    validation = _manifest(folder, "v2").validation
    assert (validation.schema_from, validation.baseline) == ("baseline", str(folder / "v1"))
    found = {(a["feature"], a["split"], a["kind"]): a for a in validation.anomalies}
    assert sorted(found) == [
        ("mass", "eval", "drift"),
        ("mass", "train", "drift"),
        ("note", "eval", "missing_rate"),
        ("note", "train", "missing_rate"),
        ("species", "eval", "drift"),
        ("species", "eval", "out_of_domain"),
        ("species", "train", "drift"),
        ("species", "train", "out_of_domain"),
    ]
    now, before = _statistics(folder, "v2"), _statistics(folder, "v1")
    for split in ("train", "eval"):
        # a new species: its count, and the L-infinity distance of the shares
        species = now[split]["features"]["species"]
        emperor = next(c["count"] for c in species["counts"] if c["value"] == "Emperor")
        domain = found[("species", split, "out_of_domain")]
        assert domain["examples"] == [{"value": "Emperor", "count": emperor}]
        assert domain["value"] == pytest.approx(emperor / species["values"], abs=0)
        a, b = _shares(species), _shares(before[split]["features"]["species"])
        linf = max(abs(a.get(v, 0) - b.get(v, 0)) for v in set(a) | set(b))
        drift = found[("species", split, "drift")]
        assert (drift["measure"], drift["threshold"]) == ("l_infinity", 0.05)
        assert drift["value"] == pytest.approx(linf, abs=1e-12)
        # a heavier mass: the Jensen-Shannon divergence of the two histograms
        js = jensen_shannon_divergence(
            _typed(folder, "v2").feature(split, "mass").histogram,
            _typed(folder, "v1").feature(split, "mass").histogram,
        )
        mass = found[("mass", split, "drift")]
        assert (mass["measure"], mass["value"], mass["threshold"]) == ("jensen_shannon", js, 0.05)
        assert js > 0.3  # 800 g on a spread of 300 g
        # a note missing twice as often, above the feature's own limit
        note = found[("note", split, "missing_rate")]
        stats = now[split]["features"]["note"]
        assert note["value"] == stats["missing"] / stats["records"] > 0.4
        assert note["threshold"] == 0.3
    assert not any(a["blocking"] for a in validation.anomalies)  # block: []


def test_a_blocking_anomaly_fails_the_run_and_publishes_nothing(runs, capsys):
    folder, code = runs
    assert code == 1
    assert not (folder / "v2b").exists()
    assert not list(folder.glob(".v2b.incomplete-*"))


def test_a_type_change_fails_the_run(runs, capsys):
    folder, _ = runs
    assert not (folder / "v1text").exists()
    # what the run said, recomputed on v1 against a schema that says mass is text
    schema = (folder / "v1" / "schema.pbtxt").read_text()
    retyped = schema.replace('name: "mass"\n  type: FLOAT', 'name: "mass"\n  type: BYTES')
    assert retyped != schema
    (folder / "text.pbtxt").write_text(retyped)
    assert validate_main([str(folder / "v1"), "--schema", str(folder / "text.pbtxt")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{folder}/v1: 2 anomalies (2 blocking; schema: config)"
    assert out[1] == (
        "  BLOCKING mass (eval): type_mismatch: Expected data of type: BYTES but got FLOAT (float)"
    )


def test_a_curated_schema_that_does_not_parse_is_a_config_error(runs):
    folder, _ = runs
    (folder / "bad.pbtxt").write_text('feature {\n  name: "x"\n  type: NUMBER\n}\n')
    with pytest.raises(ConfigError) as e:
        parse_config(
            {**yaml.safe_load((folder / "v1.yaml").read_text()),
             "validation": {"schema": "bad.pbtxt"}},
            base_dir=str(folder),
        )  # fmt: skip
    assert e.value.field == "validation.schema"
    assert str(e.value).startswith(f"validation.schema: {folder}/bad.pbtxt: ")
    assert ":3:" in str(e.value)  # the line of the problem


def test_a_rerun_on_the_same_data_finds_nothing_and_writes_the_same_bytes(runs):
    folder, _ = runs
    validation = _manifest(folder, "v1again").validation
    assert (validation.schema_from, validation.anomalies) == ("baseline", ())
    for name in ("statistics.pb", "schema.pbtxt", "statistics.json"):
        assert (folder / "v1again" / name).read_bytes() == (folder / "v1" / name).read_bytes()


def test_validate_recomputes_the_anomalies_of_a_dataset(runs, capsys):
    folder, _ = runs
    v2 = str(folder / "v2")
    args = [v2, "--baseline", str(folder / "v1"), "--config", str(folder / "v2.yaml")]
    assert validate_main([*args, "--json"]) == 0  # the config blocks nothing
    printed = json.loads(capsys.readouterr().out)
    assert printed == [dict(a) for a in _manifest(folder, "v2").validation.anomalies]
    # with the default blocking kinds (v2b's config), the missing rate of note blocks: exit 1
    blocking = [v2, "--baseline", str(folder / "v1"), "--config", str(folder / "v2b.yaml")]
    assert validate_main(blocking) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{v2}: 8 anomalies (2 blocking; schema: baseline, drift against {folder}/v1)"
    assert [line.split(":")[0] for line in out if "BLOCKING" in line] == [
        "  BLOCKING note (eval)",
        "  BLOCKING note (train)",
    ]
    # without a config: no limits, so only the values outside the baseline schema's domain
    assert validate_main([v2, "--baseline", str(folder / "v1")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[1] for line in out[1:]] == [" out_of_domain"] * 2
    # no baseline, no config: its own schema, nothing against it (no limits are set)
    assert validate_main([str(folder / "v1")]) == 0
    assert capsys.readouterr().out == f"{folder}/v1: 0 anomalies (0 blocking; schema: dataset)\n"


def test_validate_refuses_the_config_of_another_dataset(runs, capsys):
    folder, _ = runs
    retyped = folder / "v1text.yaml"  # mass is a string there
    assert validate_main([str(folder / "v1"), "--config", str(retyped)]) == 2
    assert capsys.readouterr().err == (
        f"shardflow validate: error: --config: {retyped} describes another dataset than "
        f"{folder}/v1 (feature 'mass' is string, float in the dataset): give the config "
        "the dataset was made with\n"
    )


def test_validate_names_what_it_cannot_read(tmp_path, capsys):
    assert validate_main([str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    expected = f"{tmp_path}/nothing: no manifest.json: not a dataset (or not complete)"
    assert err == f"shardflow validate: error: {expected}\n"


def test_a_date_partitioned_run_drifts_against_the_previous_date_by_default(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    for day, changed in (("2026-11-25", False), ("2026-11-26", True), ("2026-11-28", True),
                         ("2026-11-29", True)):  # fmt: skip
        (tmp_path / "in" / f"{day}.csv").write_text(_rows(changed))
    config = yaml.safe_load(_config(tmp_path, "unused", changed=False).read_text())
    config["sources"][0]["path"] = "in/{date}.csv"
    config["output"]["path"] = "out/{date}"
    config["validation"]["block"] = []
    (tmp_path / "daily.yaml").write_text(yaml.safe_dump(config))
    assert run(["--config", str(tmp_path / "daily.yaml"), "--date", "2026-11-25"]) == 0
    first = _manifest(tmp_path / "out", "2026-11-25").validation
    assert (first.baseline, first.schema_from) == (None, "inferred")  # no day before it
    capsys.readouterr()
    assert run(["--config", str(tmp_path / "daily.yaml"), "--date", "2026-11-26"]) == 0
    previous = f"{tmp_path}/out/2026-11-25"
    assert f"shardflow etl: birds: drift against {previous}" in capsys.readouterr().out
    second = _manifest(tmp_path / "out", "2026-11-26").validation
    assert (second.baseline, second.schema_from) == (previous, "baseline")
    assert {a["kind"] for a in second.anomalies} >= {"drift", "out_of_domain"}
    # no dataset of the 27th: the 28th drifts against the latest complete date, the 26th
    assert run(["--config", str(tmp_path / "daily.yaml"), "--date", "2026-11-28"]) == 0
    assert _manifest(tmp_path / "out", "2026-11-28").validation.baseline == (
        f"{tmp_path}/out/2026-11-26"
    )
    # a previous date without statistics: a note, and no drift; not an error
    (tmp_path / "out" / "2026-11-28" / "statistics.json").unlink()
    capsys.readouterr()
    assert run(["--config", str(tmp_path / "daily.yaml"), "--date", "2026-11-29"]) == 0
    assert "no drift: the previous date's " in capsys.readouterr().out
    last = _manifest(tmp_path / "out", "2026-11-29").validation
    assert (last.baseline, last.schema_from) == (None, "inferred")


def test_a_named_baseline_that_is_not_a_dataset_is_refused_before_the_run(tmp_path, capsys):
    config = _config(tmp_path, "x", changed=False)
    code = run(["--config", str(config), "--validate-only", "--baseline", str(tmp_path / "no")])
    assert code == 2
    assert capsys.readouterr().err == (
        f"shardflow etl: error: --baseline: {tmp_path}/no: no manifest.json: not a dataset "
        "(or not complete)\n"
    )


def test_a_fifth_of_the_records_rejected_is_a_warning_unless_it_blocks(tmp_path, capsys):
    """More than MAX_REJECTED_RATE (0.1) of the records read rejected: an anomaly of the run
    (no feature, no split) that does not block by default; `validation.block` can make it."""
    rows = "".join(f"{i},{'x' if i % 5 == 0 else i}\n" for i in range(100))
    (tmp_path / "a.csv").write_text("id,n\n" + rows)
    config = {
        "name": "r",
        "sources": [{"name": "a", "format": "csv", "path": "a.csv"}],
        "features": {"id": {"type": "int"}, "n": {"type": "int"}},
        "output": {"path": "out"},
    }
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(config))
    capsys.readouterr()
    assert run(["--config", str(tmp_path / "r.yaml")]) == 0
    line = (
        "rejected_rate: rejected_rate 0.2 (threshold 0.1): Rejected records: 20 of 100 records "
        "read were rejected (0.2 > 0.1); most often: 'n: not an integer' (20)"
    )
    out = capsys.readouterr().out
    assert f"  validation: 1 anomaly (schema: inferred)\n      {line}\n" in out
    anomalies = _manifest(tmp_path, "out").validation.anomalies
    assert [(a["feature"], a["split"], a["kind"], a["blocking"]) for a in anomalies] == [
        ("", "", "rejected_rate", False)
    ]
    assert validate_main([str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [f"  {line}"]
    config["validation"] = {"block": ["rejected_rate"]}
    config["output"]["path"] = "blocked"
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(config))
    assert run(["--config", str(tmp_path / "r.yaml")]) == 1
    assert capsys.readouterr().err.startswith(f"shardflow etl: job failed: validation: {line}")
    assert not (tmp_path / "blocked").exists()
