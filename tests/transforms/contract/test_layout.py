"""The contract package: one definition of the dataset layout, importable without Beam or TF."""

import ast
import pathlib
import subprocess
import sys
import zlib

from transforms.contract.config import OutputSpec
from transforms.contract.layout import (
    COMPRESSIONS,
    DEFAULT_COMPRESSION,
    DEFAULT_COMPRESSION_LEVEL,
    DEFAULT_SHARD_SIZE_MB,
    REJECTED_FILE,
    shard_name,
    shard_suffix,
)

ROOT = pathlib.Path(__file__).resolve().parents[3]
PACKAGES = ("pipelines", "transforms", "trainer", "deploy")


def test_the_contract_imports_neither_beam_nor_tensorflow():
    code = (
        "import sys, transforms.contract.manifest, transforms.contract.layout, "
        "transforms.contract.config; "
        "print(sorted(m for m in ('apache_beam', 'tensorflow') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"


def test_the_trainer_takes_only_the_contract_from_transforms():
    """The trainer's image holds transforms/__init__.py, transforms/contract/ and the ground
    floor, transforms/ui/, only."""
    imported = set()
    for path in (ROOT / "trainer").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(a.name for a in node.names)
    ours = {m for m in imported if m.split(".")[0] == "transforms"}
    assert ours and all(m.startswith(("transforms.contract", "transforms.ui")) for m in ours), ours
    assert (ROOT / "transforms" / "__init__.py").read_text().count("import") == 0


def _top_level_constants() -> dict[str, list[str]]:
    """{value: [module:name, ...]} of the string and int constants assigned at module level."""
    found: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.parse(path.read_text()).body:
                if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Constant):
                    continue
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        where = f"{path.relative_to(ROOT)}:{target.id}"
                        found.setdefault(repr(node.value.value), []).append(where)
    return found


def test_file_names_and_versions_are_defined_once():
    constants = _top_level_constants()
    assert constants["'manifest.json'"] == ["transforms/contract/layout.py:MANIFEST"]
    assert constants["'statistics.json'"] == ["transforms/contract/layout.py:STATISTICS"]
    assert constants["'facts.json'"] == ["transforms/contract/layout.py:FACTS"]
    versions = [w for w in constants["1"] if w.split(":")[1].endswith("FORMAT_VERSION")]
    assert sorted(versions) == [
        "transforms/contract/layout.py:FACTS_FORMAT_VERSION",
        "transforms/contract/layout.py:FORMAT_VERSION",
        "transforms/contract/layout.py:STATISTICS_FORMAT_VERSION",
    ]


def test_no_other_module_holds_a_compression_table():
    """A dict literal with the keys gzip and zlib is a copy of COMPRESSIONS."""
    copies = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Dict):
                    keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
                    if {"gzip", "zlib"} <= keys:
                        copies.append(str(path.relative_to(ROOT)))
    assert copies == ["transforms/contract/layout.py"]


def test_the_compression_table_matches_zlib_and_tensorflow_names():
    assert {n: (c.suffix, c.tf_type) for n, c in COMPRESSIONS.items()} == {
        "gzip": (".gz", "GZIP"),
        "zlib": (".zz", "ZLIB"),
        "none": ("", ""),
    }
    data = b"x" * 100
    for name in ("gzip", "zlib"):
        c = zlib.compressobj(6, zlib.DEFLATED, COMPRESSIONS[name].wbits)
        stream = c.compress(data) + c.flush()
        assert stream.startswith(b"\x1f\x8b") == (name == "gzip")
        assert zlib.decompress(stream, COMPRESSIONS[name].wbits) == data
    assert COMPRESSIONS["none"].wbits is None


def test_the_output_defaults_are_the_layouts():
    out = OutputSpec(path="p")
    assert (
        (out.compression, out.compression_level, out.shard_size_mb)
        == (DEFAULT_COMPRESSION, DEFAULT_COMPRESSION_LEVEL, DEFAULT_SHARD_SIZE_MB)
        == ("gzip", 6, 128)
    )
    assert out.suffix == shard_suffix("gzip") == ".tfrecord.gz"


def test_shard_and_rejected_file_names():
    assert shard_name("train", 3, 12, ".tfrecord.zz") == "train/train-00003-of-00012.tfrecord.zz"
    assert REJECTED_FILE == "rejected/rejected-00000-of-00001.jsonl"


def test_staged_and_replaced_names_read_back_to_what_they_stage():
    """The ETL's OUTPUT and a model folder's outputs are staged under one naming rule; a
    clean-up tells what an entry stages by `staged_of` alone (a name holding the tag too)."""
    from transforms.contract.layout import replaced_name, staged_name, staged_of

    assert staged_name("penguins", "20261202-a1") == ".penguins.incomplete-20261202-a1"
    assert replaced_name("export", 4242) == ".export.replaced-4242"
    for name in ("penguins", "export", "metrics.json", "a.incomplete-b"):
        assert staged_of(staged_name(name, 7)) == name
        assert staged_of(replaced_name(name, 7)) == name
    assert [staged_of(n) for n in ("export", ".export", ".incomplete-7", ".x.other-7")] == [
        None, None, None, None,
    ]  # fmt: skip
