"""End to end for the `text` and `binary` formats: fixtures, `shardflow etl`, shards read back.

Every fixture is built from a list of known records (written with plain file writes, gzip and
`struct`), and every value of the written examples, read back with TensorFlow's own TFRecord
reader and `tf.train.Example`, must equal those records; bad records must be rejected with their
reasons and locations, and the manifest's ledger must balance.
"""

from __future__ import annotations

import gzip
import json
import math
import random
import struct
from collections import Counter
from pathlib import Path

import pytest
import yaml

from pipelines import etl
from tests import readback

pytestmark = pytest.mark.slow


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _run(folder: Path, sources: list[dict], features: dict) -> tuple[Path, dict]:
    config = {
        "name": "t",
        "sources": sources,
        "features": features,
        "splits": {"train": 0.8, "eval": 0.2},
        "output": {"path": "out", "shard_size_mb": 0.01},
    }
    path = folder / "dataset.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True))
    assert etl.run(["--config", str(path)]) == 0
    out = folder / "out"
    manifest = json.loads((out / "manifest.json").read_text())
    read = sum(s["records"] for s in manifest["sources"].values())
    written = sum(s["records"] for s in manifest["splits"].values())
    assert read == written + manifest["rejected"]["records"] + manifest["duplicates"]
    return out, manifest


def _examples(out: Path, manifest: dict) -> list[tuple]:
    """Every example of every split as a sorted tuple of (feature, kind, values)."""
    return sorted(
        tuple((name, *readback.values(feature)) for name, feature in sorted(features.items()))
        for features in readback.features(out, manifest)
    )


def _rejected(out: Path) -> list[dict]:
    return readback.rejected(out)


# --- text -----------------------------------------------------------------------------------------

LOG = r"(?P<ts>\S+) (?P<level>[A-Z]+) req=(?P<id>\d+) took=(?P<ms>[\d.]+)ms(?: user=(?P<user>\w+))?"


def test_text_with_a_regex_writes_every_matching_line_and_rejects_the_rest(tmp_path):
    rng = random.Random(7)
    lines, expected, bad = [], [], {}
    for i in range(400):
        level = rng.choice(["INFO", "WARN", "ERROR"])
        ms = round(rng.uniform(0, 500), 3)
        user = rng.choice([None, "ann", "bo", "çé"])
        line = f"2024-05-01T10:{i % 60:02d}:00 {level} req={i} took={ms}ms" + (
            f" user={user}" if user else ""
        )
        lines.append(line)
        user_values = (user.encode(),) if user else ()
        expected.append(
            (
                ("id", "int64_list", (i,)),
                ("level", "bytes_list", (level.encode(),)),
                ("ms", "float_list", (_f32(ms),)),
                ("user", "bytes_list", user_values),
            )
        )
        if i % 97 == 5:
            lines.append("")  # blank lines are not records
            lines.append("   \t")
        if i % 150 == 3:
            bad[len(lines) + 1] = ("text: line does not match regex", "-- log rotated --")
            lines.append("-- log rotated --")
    bad[len(lines) + 1] = (
        "level: not one of the allowed values [INFO, WARN, ERROR]",
        "2024-05-01T11:00:00 TRACE req=900 took=1ms",
    )
    lines.append(bad[len(lines) + 1][1])
    bad[len(lines) + 1] = ("ms: not a number", "2024-05-01T11:00:01 INFO req=901 took=1.2.3ms")
    lines.append(bad[len(lines) + 1][1])
    bad[len(lines) + 1] = (
        "text: line does not match regex",
        "2024-05-01T11:00:02 INFO req=902 took=3ms extra",
    )
    lines.append(bad[len(lines) + 1][1])
    # CRLF on some lines, and no terminator after the last one
    data = "".join(line + ("\r\n" if n % 3 else "\n") for n, line in enumerate(lines[:-1]))
    (tmp_path / "app.log").write_bytes((data + lines[-1]).encode("utf-8"))

    out, manifest = _run(
        tmp_path,
        [{"name": "logs", "format": "text", "path": "app.log", "options": {"regex": LOG}}],
        {
            "id": {"type": "int"},
            "level": {"type": "string", "values": ["INFO", "WARN", "ERROR"]},
            "ms": {"type": "float", "min": 0},
            "user": {"type": "string", "required": False},
        },
    )
    assert _examples(out, manifest) == sorted(expected)
    nonblank = [line for line in lines if line.strip()]
    assert manifest["sources"] == {
        "logs": {"format": "text", "records": len(nonblank), "ignored_fields": {"ts": 402}}
    }
    assert manifest["rejected"]["reasons"] == dict(Counter(reason for reason, _ in bad.values()))
    path = str(tmp_path / "app.log")
    assert sorted((r["location"], r["reason"], r["record"]) for r in _rejected(out)) == sorted(
        (f"{path}:{n}", reason, line) for n, (reason, line) in bad.items()
    )
    assert all(r["source"] == "logs" for r in _rejected(out))


def test_text_lines_from_plain_and_gzipped_files_are_written_whole(tmp_path):
    rng = random.Random(3)
    words = [
        "tf",
        "data",
        "beam",
        "shard",
        "naïve",
        "日本語",
        "tab\there",
        "a\rb",
        '"quoted"',
        "x,y",
    ]
    folder = tmp_path / "corpus"
    folder.mkdir()
    expected = []
    for part, opener in enumerate([open, gzip.open]):
        lines = []
        for _ in range(300):
            sentence = " ".join(rng.choice(words) for _ in range(rng.randrange(1, 12)))
            lines.append(sentence)
            expected.append((("sentence", "bytes_list", (sentence.encode(),)),))
            if rng.random() < 0.05:
                lines.append("")
        suffix = ".txt" if opener is open else ".txt.gz"
        with opener(folder / f"part-{part}{suffix}", "wb") as f:
            f.write("\n".join(lines).encode("utf-8"))
            if part == 1:  # a last line that is not UTF-8: a string feature rejects it
                f.write(b"\nLatin-1 caf\xe9\n")

    out, manifest = _run(
        tmp_path,
        [{"name": "corpus", "format": "text", "path": "corpus", "options": {"field": "sentence"}}],
        {"sentence": {"type": "string"}},
    )
    assert _examples(out, manifest) == sorted(expected)
    assert manifest["sources"] == {
        "corpus": {"format": "text", "records": 601, "ignored_fields": {}}
    }
    reason = "sentence: not valid text in the source's encoding"
    assert manifest["rejected"]["reasons"] == {reason: 1}
    [rejected] = _rejected(out)
    assert rejected["reason"] == reason
    assert rejected["location"] == f"{folder / 'part-1.txt.gz'}:{len(lines) + 1}"
    assert rejected["record"] == "Latin-1 caf\\xe9"


# --- binary ---------------------------------------------------------------------------------------

POINT = "<qfH?3x8s"  # 26 bytes: id, score, count, flag, padding, tag


def test_binary_struct_records_between_header_and_footer(tmp_path):
    rng = random.Random(11)
    records = []
    for i in range(500):
        tag = bytes(rng.choice(b"abcxyz") for _ in range(rng.randrange(0, 9)))
        records.append(
            (i - 250, rng.uniform(-1e6, 1e6), rng.randrange(65536), rng.random() < 0.5, tag)
        )
    records[123] = (123, float("nan"), 1, True, b"nan")
    body = b"".join(struct.pack(POINT, *r) for r in records)
    leftover = b"\x07" * 11
    (tmp_path / "points.bin").write_bytes(
        b"POINTS v1".ljust(16, b"\0") + body + leftover + b"CRC:1234"
    )

    out, manifest = _run(
        tmp_path,
        [
            {
                "name": "points",
                "format": "binary",
                "path": "points.bin",
                "options": {
                    "record_bytes": 26,
                    "header_bytes": 16,
                    "footer_bytes": 8,
                    "struct": POINT,
                    "fields": ["id", "score", "count", "flag", "tag"],
                },
            }
        ],
        {
            "id": {"type": "int"},
            "score": {"type": "float"},
            "count": {"type": "int", "max": 65535},
            "flag": {"type": "int"},
            "tag": {"type": "bytes"},
        },
    )
    expected = [
        (
            ("count", "int64_list", (count,)),
            ("flag", "int64_list", (int(flag),)),
            ("id", "int64_list", (i,)),
            ("score", "float_list", (_f32(score),)),
            ("tag", "bytes_list", (tag.ljust(8, b"\0"),)),
        )
        for i, score, count, flag, tag in records
        if not math.isnan(score)
    ]
    assert _examples(out, manifest) == sorted(expected)
    assert manifest["sources"] == {
        "points": {"format": "binary", "records": 501, "ignored_fields": {}}
    }
    assert manifest["rejected"]["reasons"] == {
        "binary: 11 bytes left after the last whole record of 26 bytes": 1,
        "score: not a number": 1,
    }
    rejected = sorted(_rejected(out), key=lambda r: r["reason"])
    path = str(tmp_path / "points.bin")
    assert [(r["location"], r["reason"]) for r in rejected] == [
        (f"{path}:501", "binary: 11 bytes left after the last whole record of 26 bytes"),
        (f"{path}:124", "score: not a number"),
    ]
    assert json.loads(rejected[0]["record"]) == {
        "offset": 16 + 500 * 26,
        "length": 11,
        "hex": leftover.hex(),
    }
    assert json.loads(rejected[1]["record"])["id"] == 123


def test_binary_named_byte_ranges_of_mixed_types_and_endianness(tmp_path):
    rng = random.Random(5)
    stations = ["Zürich", "Oslo", "Nouméa", "a" * 10, ""]
    records = []
    for _ in range(300):
        name = rng.choice(stations).encode("utf-8")
        raw = bytes(rng.randrange(256) for _ in range(8))
        records.append(
            (rng.randrange(2**32), rng.uniform(-90, 60), rng.randrange(-(2**15), 2**15), name, raw)
        )
    records[42] = (42, 1.0, 0, b"\xffbad", b"\0" * 8)

    def pack(uid, temp, delta, name, raw):
        return (
            struct.pack(">I", uid)
            + struct.pack(">d", temp)
            + struct.pack("<h", delta)
            + name.ljust(10, b"\0")
            + raw
        )

    (tmp_path / "readings.dat").write_bytes(b"".join(pack(*r) for r in records))
    fields = {
        "uid": {"offset": 0, "length": 4, "type": "uint", "endian": "big"},
        "temp": {"offset": 4, "length": 8, "type": "float", "endian": "big"},
        "delta": {"offset": 12, "length": 2, "type": "int"},
        "station": {"offset": 14, "length": 10, "type": "string"},
        "raw": {"offset": 24, "length": 8, "type": "bytes"},
    }
    out, manifest = _run(
        tmp_path,
        [
            {
                "name": "readings",
                "format": "binary",
                "path": "readings.dat",
                "options": {"record_bytes": 32, "fields": fields},
            }
        ],
        {
            "uid": {"type": "int"},
            "temp": {"type": "float"},
            "delta": {"type": "int"},
            "station": {"type": "string"},
            "raw": {"type": "bytes"},
        },
    )
    expected = [
        (
            ("delta", "int64_list", (delta,)),
            ("raw", "bytes_list", (raw,)),
            ("station", "bytes_list", (name,)),
            ("temp", "float_list", (_f32(temp),)),
            ("uid", "int64_list", (uid,)),
        )
        for n, (uid, temp, delta, name, raw) in enumerate(records)
        if n != 42
    ]
    assert _examples(out, manifest) == sorted(expected)
    assert manifest["sources"] == {
        "readings": {"format": "binary", "records": 300, "ignored_fields": {}}
    }
    reason = "station: not valid UTF-8"
    assert manifest["rejected"]["reasons"] == {reason: 1}
    [rejected] = _rejected(out)
    assert (rejected["location"], rejected["reason"]) == (f"{tmp_path / 'readings.dat'}:43", reason)
    assert json.loads(rejected["record"])["uid"] == 42


@pytest.mark.parametrize(
    "fmt, options, message",
    [
        ("text", {"regex": r"(\d+)"}, "sources[0].options.regex: has no named group"),
        (
            "binary",
            {"record_bytes": 6, "struct": "<i"},
            "sources[0].options.struct: '<i' describes 4",
        ),
        (
            "binary",
            {"record_bytes": 4, "fields": {"a": {"offset": 2, "length": 4, "type": "bytes"}}},
            "sources[0].options.fields.a.length: bytes 2 to 6 do not fit in record_bytes (4)",
        ),
    ],
)
def test_bad_options_exit_2_with_one_line_naming_the_option(
    tmp_path, capsys, fmt, options, message
):
    (tmp_path / "data").write_bytes(b"1234")
    config = {
        "name": "t",
        "sources": [{"name": "s", "format": fmt, "path": "data", "options": options}],
        "features": {"a": {"type": "int"}},
        "output": {"path": "out"},
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    assert etl.run(["--config", str(tmp_path / "c.yaml")]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"shardflow etl: error: {message}")
    assert not (tmp_path / "out").exists()
