"""Every source format gives the same bytes with 1 and 2 local worker processes.

One config unions a source of every format (the small files of test_formats_gcs.py, two images
and a SQLite table); it runs once in process and once with `--direct_num_workers 2
--direct_running_mode multi_processing`, and the two datasets must be byte-identical.
"""

from __future__ import annotations

import io
import sqlite3
from pathlib import Path

import pytest
import yaml
from PIL import Image

from tests.reliability.test_faults import etl, finish, tree
from tests.transforms.sources.test_gcs import FILES

pytestmark = pytest.mark.slow

# source -> features read from it (all optional: each record comes from one source only)
FIELDS = {
    "csv": {"id": "int", "name": "string"},
    "jsonl": {"id": "int"},
    "parquet": {"id": "int", "name": "string"},
    "avro": {"id": "int"},
    "tfrecord": {"id": "int"},
    "text": {"line": "string"},
    "binary": {"a": "int", "b": "int"},
    "images": {"label": "string", "height": "int", "image": "bytes"},
    "sql": {"id": "int", "v": "string"},
}


def _png(color: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (4, 3), (color, 20, 30)).save(out, "PNG")
    return out.getvalue()


def write_inputs(folder: Path) -> Path:
    sources = []
    for fmt, (name, data, options) in sorted(FILES.items()):
        (folder / name).write_bytes(data)
        sources.append({"name": fmt, "format": fmt, "path": name, "options": options})
    for label, color in (("cat", 10), ("dog", 200)):
        (folder / "photos" / label).mkdir(parents=True)
        (folder / "photos" / label / "1.png").write_bytes(_png(color))
    sources.append({"name": "images", "format": "images", "path": "photos"})
    db = sqlite3.connect(folder / "t.db")
    db.execute("CREATE TABLE t (id INTEGER, v TEXT)")
    db.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"v{i}") for i in range(50)])
    db.commit()
    db.close()
    sources.append(
        {"name": "sql", "format": "sql",
         "options": {"url": "sqlite:///t.db", "table": "t", "partition_column": "id"}}
    )  # fmt: skip
    features = {
        f"{source}_{field}": {"type": kind, "source": f"{source}.{field}", "required": False}
        for source, fields in FIELDS.items()
        for field, kind in fields.items()
    }
    cfg = folder / "every.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "name": "every",
                "sources": sources,
                "features": features,
                "splits": {"train": 0.5, "eval": 0.5},
                "output": {"path": "out", "shard_size_mb": 0.001},
            }
        )
    )
    return cfg


def test_every_format_writes_the_same_bytes_with_one_and_two_worker_processes(tmp_path):
    cfg = write_inputs(tmp_path)
    finish(etl(cfg))
    one = tree(tmp_path / "out")
    finish(etl(cfg, "--direct_num_workers", "2", "--direct_running_mode", "multi_processing",
               "--overwrite"))  # fmt: skip
    assert tree(tmp_path / "out") == one
    manifest = yaml.safe_load(one["manifest.json"])
    read = {name: s["records"] for name, s in manifest["sources"].items()}
    assert set(read) == set(FIELDS) and all(read.values()), read
    assert sum(s["records"] for s in manifest["splits"].values()) > 50
