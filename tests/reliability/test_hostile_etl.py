"""The hostile corpus, part 1: what `etl` and `init` are given (tests/reliability/hostile.py has
the harness and its invariants). One case per line of CASES, by class: secrets, one input that
would stop the job, dates, records that would be lost, values that would change, silent
success, errors, the newcomer's loop."""

from __future__ import annotations

import codecs
import json
import os
from pathlib import Path

import pytest

from tests.reliability.hostile import Case, config, csv_source, jsonl_source, run_case
from tests.reliability.mounts import mount_tmpfs, unmount

ID_NAME = {"id": {"type": "int"}, "name": {"type": "string", "required": False}}
ROWS = "id,name\n1,a\n2,b\n3,c\n"


def _etl(d: Path, sources: list[dict], features: dict = ID_NAME, *flags: str, **top):
    return "etl", ["--config", config(d, sources, features, **top), *flags]


def _rows(d: Path, columns: list[str]) -> list[tuple]:
    """The values written to out/, per record, sorted (read back without TensorFlow)."""
    from tests import readback

    out = d / "out"
    return sorted(readback.rows(out, readback.manifest(out), columns))


def _rejected(d: Path) -> dict[str, int]:
    return json.loads((d / "out" / "manifest.json").read_text())["rejected"]["reasons"]


# --- secrets -----------------------------------------------------------------------------------

SECRETS = [
    Case(f"init-source-{scheme}", "secret",
         lambda d, u=url: ("init", ["--source", u, "--output", str(d / "c.yaml")]),
         2, "is not a file location", secret="s3cr3t-pw")
    for scheme, url in [
        ("postgresql", "postgresql://etl:s3cr3t-pw@db.example/sales"),
        ("sqlite", "sqlite://etl:s3cr3t-pw@/x.db"),
        ("https", "https://user:s3cr3t-pw@files.example/a.csv"),
        ("mysql", "mysql://root:s3cr3t-pw@127.0.0.1/db"),
    ]
] + [
    Case("etl-source-path-url", "secret",
         lambda d: _etl(d, [{"name": "s", "format": "csv",
                             "path": "postgresql://u:s3cr3t-pw@h/db"}]),
         2, "is not a file location", secret="s3cr3t-pw"),
    Case("etl-sql-url-with-password", "secret",
         lambda d: _etl(d, [{"name": "s", "format": "sql", "options": {
             "url": "postgresql://u:s3cr3t-pw@h/db", "table": "t"}}]),
         2, "holds a password", secret="s3cr3t-pw"),
]  # fmt: skip


# --- one input that would stop the job -----------------------------------------------------------


def _fifo(d: Path):
    source = csv_source(d, ROWS)
    os.mkfifo(d / "b.csv")
    return _etl(d, [dict(source, path="*.csv")])


def _fifo_in_images(d: Path):
    (d / "photos" / "cat").mkdir(parents=True)
    os.mkfifo(d / "photos" / "cat" / "x.png")
    return _etl(d, [{"name": "p", "format": "images", "path": "photos"}],
                {"image": {"type": "image"}, "label": {"type": "string"}})  # fmt: skip


def _device_link(target: str):
    def setup(d: Path):
        source = csv_source(d, ROWS)
        os.symlink(target, d / "b.csv")
        return _etl(d, [dict(source, path="*.csv")])

    return setup


def _distinct_keys(d: Path):
    lines = [json.dumps({"id": i, f"k{i}": "v" * 50}) for i in range(3000)]
    return _etl(d, [jsonl_source(d, lines)], {"id": {"type": "int"}})


def _regex_line(d: Path):
    (d / "a.log").write_text("aaa b\n" + "a" * 20000 + "!\n")
    source = {"name": "s", "format": "text", "path": "a.log",
              "options": {"regex": r"(?P<w>(a+)+) (?P<r>\w)"}}  # fmt: skip
    return _etl(d, [source], {"w": {"type": "string"}, "r": {"type": "string"}})


def _regex_alternation(d: Path):
    (d / "a.log").write_text("x=1,y=2\n" + "a=" * 5000 + "\n")
    source = {"name": "s", "format": "text", "path": "a.log",
              "options": {"regex": r"(?P<kv>(\w+=\w*,?)*)"}}  # fmt: skip
    return _etl(d, [source], {"kv": {"type": "string"}})


def _many_features(d: Path):
    features = {f"f{i}": {"type": "float", "required": False} for i in range(5000)}
    return _etl(d, [csv_source(d, ROWS)], {**ID_NAME, **features}, "--validate-only")


def _huge_image(d: Path):
    (d / "photos" / "cat").mkdir(parents=True)
    with open(d / "photos" / "cat" / "big.png", "wb") as f:
        f.truncate((64 << 20) + 10)
    return _etl(d, [{"name": "p", "format": "images", "path": "photos"}],
                {"image": {"type": "image"}, "label": {"type": "string"}},
                output={"path": "out", "allow": ["empty_source", "empty_split"],
                        "max_rejected_fraction": 1})  # fmt: skip


INPUTS = [
    Case("fifo-in-a-csv-glob", "input", _fifo, 2, "is a named pipe (FIFO), not a regular file"),
    Case("fifo-in-an-images-folder", "input", _fifo_in_images, 2, "is a named pipe (FIFO)"),
    Case("link-to-dev-zero", "input", _device_link("/dev/zero"), 2, "is a character device"),
    Case("link-to-dev-urandom", "input", _device_link("/dev/urandom"), 2, "character device"),
    Case("jsonl-3000-distinct-keys", "input", _distinct_keys, 0, "and 2992 more",
         check=lambda d: _ignored_listed(d, 100, 2900)),
    Case("regex-nested-quantifier-hostile-line", "input", _regex_line, 0,
         "regex has a nested quantifier ((a+)+)",
         check=lambda d: _reasons(d, {"text: line does not match regex": 1})),
    Case("regex-repeated-group-10k-chars", "input", _regex_alternation, 0,
         "matched by RE2 in linear time"),
    Case("5000-features", "input", _many_features, 2, "more than the 1,000 a config may declare"),
    Case("image-file-over-64-mib", "input", _huge_image, 0,
         check=lambda d: _reasons(d, {"image: file larger than 64 MiB, not read": 1})),
]  # fmt: skip


def _ignored_listed(d: Path, listed: int, unlisted: int) -> None:
    entry = json.loads((d / "out" / "manifest.json").read_text())["sources"]["s"]
    assert len(entry["ignored_fields"]) == listed
    assert entry["ignored_fields_unlisted"] == unlisted
    assert (d / "out" / "manifest.json").stat().st_size < 20_000


def _reasons(d: Path, reasons: dict[str, int]) -> None:
    assert _rejected(d) == reasons


# --- dates ---------------------------------------------------------------------------------------


def _backfill(template: str, *flags: str):
    def setup(d: Path):
        source = csv_source(d, ROWS)
        return _etl(d, [source], ID_NAME, "--from", "2025-12-31", "--to", "2026-01-02", *flags,
                    output={"path": template})  # fmt: skip

    return setup


DATES = [
    Case("backfill-year-template-across-new-year", "date", _backfill("out/{YYYY}"), 2,
         "every date of --from/--to needs a dataset of its own"),
    Case("backfill-year-template-overwrite", "date", _backfill("out/{YYYY}", "--overwrite"), 2,
         "every date of --from/--to needs a dataset of its own"),
    Case("backfill-month-template", "date", _backfill("out/{YYYY}-{MM}"), 2,
         "gives"),
    Case("backfill-without-template", "date", _backfill("out/fixed"), 2,
         "has no date template"),
]  # fmt: skip


# --- records that would be lost ---------------------------------------------------------------


def _tfrecords(d: Path, damage: str):
    from tests.reliability.test_reader_edge_cases import _examples
    from transforms.sink.framing import frame_records

    examples = _examples(list(range(1, 9)), [b"r%d" % i for i in range(1, 9)])
    data = bytearray(frame_records(examples))
    fourth = sum(16 + len(e) for e in examples[:3])
    if damage in ("crc", "both"):
        data[fourth + 8] ^= 0x10
    if damage in ("length", "both"):
        data[fourth + 1] ^= 0x02
    (d / "a.tfrecord").write_bytes(bytes(data))
    source = {"name": "s", "format": "tfrecord", "path": "a.tfrecord"}
    return _etl(d, [source], {"id": {"type": "int"}, "name": {"type": "string"}})


def _written_ids(expected: list[int]):
    def check(d: Path) -> None:
        assert [r[0] for r in _rows(d, ["id", "name"])] == [(i,) for i in expected]

    return check


RECORDS = [
    Case(f"tfrecord-corrupt-{damage}", "records", lambda d, x=damage: _tfrecords(d, x), 0,
         check=lambda d: (_reasons(d, {"tfrecord: corrupt record length": 1}),
                          _written_ids([1, 2, 3, 5, 6, 7, 8])(d)))
    for damage in ("crc", "length", "both")
] + [
    Case("csv-quote-left-open", "records",
         lambda d: _etl(d, [csv_source(d, 'id,name\n1,a\n2,"b\n3,c\n4,d\n')]), 0,
         check=lambda d: _reasons(d, {"csv: a quote opened in this record is never closed: the "
                                      "3 lines to the end of the file are one record": 1})),
    Case("csv-utf16-without-encoding", "records",
         lambda d: _etl(d, [csv_source(d, codecs.BOM_UTF16_LE + ROWS.encode("utf-16-le"))]), 1,
         "starts with a UTF-16 byte order mark, but options.encoding is 'utf-8'"),
    Case("csv-utf16-validate-only", "records",
         lambda d: _etl(d, [csv_source(d, codecs.BOM_UTF16_BE + ROWS.encode("utf-16-be"))],
                        ID_NAME, "--validate-only"), 2, "set encoding: utf-16"),
]  # fmt: skip


# --- values --------------------------------------------------------------------------------------


def _json_case(name: str, value: str, ftype: str, reason: str | None, written=None) -> Case:
    """One JSON number for `x`: rejected with `reason`, or written as `written`."""

    def check(d: Path) -> None:
        if reason is None:
            assert [r[1] for r in _rows(d, ["id", "x"])] == [(written,)]
        else:
            assert _rejected(d) == {reason: 1}

    allow = {
        "output": {
            "path": "out",
            "allow": ["empty_split", "empty_source"],
            "max_rejected_fraction": 1,
        }
    }  # its one record may be rejected: the point
    return Case(name, "values", _json_allowing(value, ftype, allow), 0, check=check)


def _json_allowing(value: str, ftype: str, top: dict):
    def setup(d: Path):
        lines = [f'{{"id": 1, "x": {value}}}']
        return _etl(d, [jsonl_source(d, lines)], {"id": {"type": "int"}, "x": {"type": ftype}},
                    **top)  # fmt: skip

    return setup


def _csv_value(value: str, ftype: str, reason: str):
    def setup(d: Path):
        return _etl(d, [csv_source(d, f"id,x\n1,{value}\n")],
                    {"id": {"type": "int"}, "x": {"type": ftype}},
                    output={"path": "out", "allow": ["empty_split", "empty_source"],
                            "max_rejected_fraction": 1})  # fmt: skip

    return setup


OVER, UNDER = "x: outside float32 range", "x: too small for float32 (would be 0)"
VALUES = [
    _json_case("json-1e400", "1e400", "float", OVER),
    _json_case("json-minus-1e400", "-1e400", "float", OVER),
    _json_case("json-1e-400", "1e-400", "float", UNDER),
    _json_case("json-2e-310-subnormal-float64", "2e-310", "float", UNDER),
    _json_case("json-integral-float-past-2-53", "9007199254740993.0", "int", "x: not an integer"),
    _json_case("json-integral-float-1e20", "1e20", "int", "x: not an integer"),
    _json_case("json-5000-digit-int", "1" * 5000, "int", "x: integer out of int64 range"),
    _json_case("json-5000-digit-float", "9" * 5000, "float", OVER),
    _json_case("json-int-2-63", str(2**63), "int", "x: integer out of int64 range"),
    _json_case("json-exact-integral-float", "7.0", "int", None, 7),
    Case("json-duplicate-key", "values",
         lambda d: _etl(d, [jsonl_source(d, ['{"id": 1, "name": "a", "name": "b"}',
                                             '{"id": 2, "name": "c"}'])]), 0,
         check=lambda d: _reasons(d, {"json: duplicate key": 1})),
    Case("json-nested-duplicate-key", "values",
         lambda d: _etl(d, [jsonl_source(d, ['{"id": 1, "m": {"k": 1, "k": 2}}',
                                             '{"id": 2, "m": {"k": 3}}'])],
                        {"id": {"type": "int"}}), 0,
         check=lambda d: _reasons(d, {"json: duplicate key": 1})),
    Case("csv-1e-400", "values", _csv_value("1e-400", "float", UNDER), 0,
         check=lambda d: _reasons(d, {UNDER: 1})),
    Case("csv-minus-1e-999", "values", _csv_value("-1e-999", "float", UNDER), 0,
         check=lambda d: _reasons(d, {UNDER: 1})),
]  # fmt: skip


# --- silent success ------------------------------------------------------------------------------

SILENT = [
    Case("misspelled-optional-feature", "silent",
         lambda d: _etl(d, [csv_source(d, ROWS)],
                        {"id": {"type": "int"}, "nmae": {"type": "string", "required": False}}),
         1, "no source has a field 'nmae'"),
    Case("misspelled-label-with-default", "silent",
         lambda d: _etl(d, [csv_source(d, ROWS)],
                        {**ID_NAME, "lable": {"type": "string", "required": False,
                                              "default": "none"}}),
         1, "no source has a field 'lable'"),
    Case("misspelled-jsonl-field", "silent",
         lambda d: _etl(d, [jsonl_source(d, ['{"id": 1, "name": "a"}'])],
                        {"id": {"type": "int"}, "Name": {"type": "string", "required": False}}),
         1, "no source has a field 'Name'"),
    Case("every-record-rejected", "silent",
         lambda d: _etl(d, [csv_source(d, "id,name\nx,a\ny,b\n")]), 1,
         "sources[0] 's': all 2 records were rejected (most often: 'id: not an integer', 2x)"),
]  # fmt: skip


# --- errors that help, and the newcomer's loop ---------------------------------------------------


def _mounted(options: str):
    def setup(d: Path):
        mount_tmpfs(d / "m", options)
        return _etl(d, [csv_source(d, ROWS)], ID_NAME, "--output",
                    str(d / "m" if "ro" in options else d / "m" / "out"))  # fmt: skip

    return setup


def _existing_output(*flags: str):
    def setup(d: Path):
        command, argv = _etl(d, [csv_source(d, ROWS)])
        from pipelines.etl import run

        assert run(argv) == 0
        return command, [*argv, *flags]

    return setup


ERRORS = [
    Case("output-with-a-newline", "errors",
         lambda d: _etl(d, [csv_source(d, ROWS)], ID_NAME, "--output", str(d / "o\nut")), 2,
         "it holds a control character, U+000A"),
    Case("output-a-read-only-mount-point", "errors", _mounted("ro,size=1m"), 2,
         "is a mount point"),
    Case("validate-only-over-a-dataset", "newcomer", _existing_output("--validate-only"), 0,
         "already holds a dataset: a run needs --overwrite", keep=("out",)),
    Case("rerun-without-overwrite-keeps-the-dataset", "newcomer", _existing_output(), 2,
         "give --overwrite to replace it", keep=("out",)),
    Case("wrong-delimiter-validate-only", "newcomer",
         lambda d: _etl(d, [csv_source(d, ROWS, delimiter=";")], ID_NAME, "--validate-only"), 2,
         "are split by ',', not by options.delimiter ';'"),
    Case("wrong-delimiter-tab", "newcomer",
         lambda d: _etl(d, [csv_source(d, ROWS.replace(",", "\t"))], ID_NAME, "--validate-only"),
         1, "the header has one column 'id\\tname' holding '\\t': set options.delimiter"),
]  # fmt: skip

CASES = SECRETS + INPUTS + DATES + RECORDS + VALUES + SILENT + ERRORS


@pytest.mark.timeout(90)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_case(case: Case, tmp_path: Path, capfd):
    try:
        run_case(case, tmp_path, capfd)
    finally:
        if (tmp_path / "m").is_dir() and os.path.ismount(tmp_path / "m"):
            unmount(tmp_path / "m")


def test_the_corpus_covers_every_class():
    kinds = {c.kind for c in CASES}
    assert kinds == {"secret", "input", "date", "records", "values", "silent", "errors",
                     "newcomer"}  # fmt: skip
    assert len({c.name for c in CASES}) == len(CASES)
