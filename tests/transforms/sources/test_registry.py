"""The source registry: one descriptor per format module, what a file's name tells, and each
format's facts written once."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from transforms.contract.config import SOURCE_FORMATS, SourceOptions
from transforms.sources import registry

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("pipelines", "transforms", "trainer", "deploy")
# The reference's examples show values a user writes (`extensions: [".png", ".jpg"]`); the layout
# names the endings of what the ETL writes (`.tfrecord` shards, `.jsonl` rejected records), and
# progress the ending of the counts each worker process writes (`<pid>.json`).
EXEMPT = {
    ROOT / "pipelines/config/reference_options.py",
    ROOT / "transforms/contract/layout.py",
    ROOT / "transforms/progress.py",
}


@pytest.mark.parametrize("fmt", SOURCE_FORMATS)
def test_every_format_module_declares_its_descriptor(fmt):
    described = registry.describe(fmt)
    assert described.name == fmt
    assert described.kind == ("query" if fmt in registry.QUERY_FORMATS else "file")
    assert issubclass(described.options_type, SourceOptions)
    assert callable(described.options)
    for ending in (*described.extensions, *described.compressed):
        assert ending.startswith(".") and ending == ending.lower(), ending
    if described.kind == "query":  # named, its Beam steps imported when a pipeline reads
        assert not described.extensions and not described.splittable
        assert isinstance(described.reader, str) and callable(registry.reader(fmt))
    else:
        assert callable(described.reader) and registry.parser(fmt) is described.reader


def test_a_descriptor_of_the_wrong_kind_is_refused(monkeypatch):
    import transforms.sources.text as text

    registry.describe.cache_clear()
    try:
        monkeypatch.setattr(text, "FORMAT", dataclasses.replace(text.FORMAT, kind="query"))
        with pytest.raises(TypeError, match="transforms.sources.text.FORMAT does not describe"):
            registry.describe("text")
    finally:
        monkeypatch.undo()
        registry.describe.cache_clear()
    assert registry.describe("text").kind == "file"


@pytest.mark.parametrize(
    "name, formats",
    [
        ("a.csv", ("csv",)),
        ("d/a.TSV.gz", ("csv",)),
        ("a.txt", ("csv", "text")),  # delimited text first; init falls back to lines
        ("a.json.bz2", ("jsonl",)),
        ("a.pq", ("parquet",)),
        ("a.parquet.gz", ()),  # Parquet and Avro compress inside, never as a whole
        ("a.avro.xz", ()),
        ("a.tfrecords.gz", ("tfrecord",)),
        ("train-00000-of-00004.zz", ("tfrecord",)),  # an ending only TFRecord reads
        ("train-00001-of-00004", ("tfrecord",)),  # TFX shards have no ending
        ("a.bin.zst", ("binary",)),
        ("a.JPG", ("images",)),
        ("a.jpg.gz", ()),  # an image folder reads its files by their own ending
        ("a.gz", ()),
        ("README", ()),
    ],
)
def test_a_file_name_tells_the_formats_that_read_it(name, formats):
    assert registry.formats_of_name(name) == formats


def test_split_suffix_takes_the_longest_compression_ending_first():
    assert registry.split_suffix("a/b.Tfrecord.GZ") == ("b", ".tfrecord", ".gz")
    assert registry.split_suffix("x.csv.deflate") == ("x", ".csv", ".deflate")
    assert registry.split_suffix(".gz") == (".gz", "", "")
    assert registry.compression_endings()[0] == ".deflate"


def test_each_file_ending_is_written_once_in_the_code():
    """Every format's endings are declared by its own module: no other module of the code spells
    one (`.tfrecord` and `.zz`, the ETL's own output endings, come from the layout); the
    whole-file compression endings by transforms/files.py, which undoes them."""
    sources = {
        path: path.read_text("utf-8")
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path not in EXEMPT
    }
    for described in registry.file_formats():
        for ending in described.extensions:
            spelled = [
                str(p.relative_to(ROOT)) for p, text in sources.items() if f'"{ending}"' in text
            ]
            owners = [f"transforms/sources/{f}.py" for f in registry.formats_of_extension(ending)]
            assert set(spelled) <= set(owners), (ending, spelled)
    for ending in registry.FILE_COMPRESSIONS:
        spelled = [str(p.relative_to(ROOT)) for p, text in sources.items() if f'"{ending}"' in text]
        assert spelled == ["transforms/files.py"], (ending, spelled)


def test_no_format_facts_outside_the_registry_and_the_format_modules():
    """The lists of formats that the descriptors replaced are gone: no module but the registry
    lists the query formats, and none keeps a table of endings or of splittable formats."""
    listing = re.compile(
        r'\(\s*"sql",\s*"bigquery"\s*\)|\bSPLITTABLE\b|EXTENSIONS\s*(:[^=]*)?=\s*\{'
    )
    found = [
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if listing.search(path.read_text("utf-8"))
    ]
    assert found == ["transforms/sources/registry.py"]


def test_telling_a_file_format_imports_no_beam():
    """The file formats' modules are light: asking the registry what a name tells imports
    neither Beam nor TensorFlow (the query formats' modules, which import Beam, stay unloaded)."""
    code = (
        "import sys; from transforms.sources import registry; "
        "assert registry.formats_of_name('a.csv') == ('csv',); "
        "print(sorted(m for m in ('apache_beam', 'tensorflow', 'transforms.sources.sql') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert (out.returncode, out.stdout.strip()) == (0, "[]"), out.stderr


def test_init_names_why_a_compressed_file_is_not_read():
    from pipelines.config.fields import ConfigError
    from pipelines.init import detect

    with pytest.raises(ConfigError, match="parquet files compress their data inside"):
        detect.file_format("a.parquet.gz")
    with pytest.raises(
        ConfigError, match=r"a compressed csv file \(\.zz\).*read compressed as \.gz"
    ):
        detect.file_format("a.tsv.zz")  # .zz is TFRecord's zlib ending only
