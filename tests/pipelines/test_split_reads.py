"""Large CSV and JSON Lines files read in byte ranges, and a Parquet file in runs of row groups:
the dataset is the one of a whole read, in process and with 2 worker processes (ranges are
spread over them), whether the encoded records are spilled in one run per split or in many
small ones."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.etl import run
from tests.reliability.test_faults import etl, finish, tree
from transforms.sink import spill, write
from transforms.sources import ranges

pytestmark = pytest.mark.slow


def write_inputs(folder) -> str:
    rng = random.Random(5)
    rows = ["id,name,score"]
    for i in range(3000):
        if i % 97 == 0:
            rows.append(f'{i},"two\nlines, ""quoted""",{i}')
        elif i % 89 == 0:
            rows.append(f"{i},too,many,fields")
        else:
            rows.append(f"{i},n{i}{'x' * rng.randrange(40)},{rng.random():.4f}")
    (folder / "big.csv").write_text("\n".join(rows) + "\n")
    lines = [f'{{"id": {3000 + i}, "name": "j{i}"}}' if i % 50 else "oops" for i in range(2000)]
    (folder / "big.jsonl").write_text("\n".join(lines) + "\n")
    ids = list(range(5000, 8000))
    table = pa.table({"id": ids, "name": [f"p{i}" * (i % 5) for i in ids]})
    pq.write_table(table, folder / "big.parquet", row_group_size=400)
    cfg = folder / "c.yaml"
    cfg.write_text(
        "name: split\n"
        "sources: [{name: c, format: csv, path: big.csv},\n"
        "          {name: j, format: jsonl, path: big.jsonl},\n"
        "          {name: p, format: parquet, path: big.parquet}]\n"
        "key: id\n"
        "features: {id: {type: int}, name: {type: string}, score: {type: float, required: false}}\n"
        "splits: {train: 0.8, eval: 0.2}\n"
        "output: {path: out, shard_size_mb: 0.05}\n"
    )
    return str(cfg)


def test_ranges_give_the_bytes_of_whole_files_in_process_and_over_two_workers(
    tmp_path, monkeypatch
):
    cfg = write_inputs(tmp_path)
    assert run(["--config", cfg]) == 0
    whole = tree(tmp_path / "out")

    planned = []
    plan, cut = ranges.pieces, ranges.cut

    def spy(*args, **kwargs):  # Parquet: ranges; CSV and JSON Lines: pieces, then ranges
        result = plan(*args, **kwargs)
        if isinstance(result[0], ranges.Range):
            planned.append(len(result))
        return result

    def spy_cut(*args, **kwargs):
        planned.append(len(result := cut(*args, **kwargs)))
        return result

    monkeypatch.setattr(ranges, "pieces", spy)
    monkeypatch.setattr(ranges, "cut", spy_cut)
    spilled = []
    write_spill_files = spill.write_spill_files

    def spy_runs(*args, **kwargs):
        spilled.extend(result := list(write_spill_files(*args, **kwargs)))
        return iter(result)

    monkeypatch.setattr(spill, "write_spill_files", spy_runs)
    monkeypatch.setattr(write, "write_spill_files", spy_runs)
    # ~10 KB ranges; runs of ~20 KB: each shard reads from many
    assert run(["--config", cfg, "--overwrite", "--split-mb", "0.01", "--spill-mb", "0.02"]) == 0
    assert len(planned) == 3 and min(planned) > 1, planned  # every file was cut
    assert len([r for r in spilled if r.split == 0]) > 5, spilled
    assert tree(tmp_path / "out") == whole

    finish(etl(tmp_path / "c.yaml", "--overwrite", "--direct_num_workers", "2",
               "--direct_running_mode", "multi_processing", "--split-mb", "0.01",
               "--spill-mb", "0.02"))  # fmt: skip
    assert tree(tmp_path / "out") == whole
