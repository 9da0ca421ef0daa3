"""Benchmark: the check that a dataset's shards are the manifest's, before a run reads them.

`shardflow train` (and `--verify` of every reader) first reads every shard once: its size,
sha256 and the records it frames against the manifest's (trainer/dataset/verify.py, through the
TensorFlow-free framing). Measured side by side in one run, on one dataset written here:

  floor        every shard's bytes read and hashed (sha256), 8 at a time: what any check of
               the checksums costs
  tf.io.gfile  the check as it was made before the dataset floor: bytes read through
               tf.io.gfile, sha256, zlib inflate and a frame count in Python, 8 at a time
  verify       trainer.dataset.verify.verify_shards (mmap, sha256, ISA-L inflate, frames cut
               by their lengths), 8 at a time

Reported: the median of `--repeats` runs of each (2 noisy cores: medians) and each one's time
over the floor's.

  python benchmarks/shard_verify.py [--records 400000] [--repeats 5] [--record]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import struct
import sys
import tempfile
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import RESULTS, append_results, command_line, machine_facts  # noqa: E402

THREADS = 8
PIECE = 4 << 20


def floor(paths: list[str]) -> None:
    def one(path: str) -> str:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while piece := f.read(PIECE):
                digest.update(piece)
        return digest.hexdigest()

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(one, paths))


def through_gfile(paths: list[str]) -> None:
    """sha256 and the frame count of each shard as read through tf.io.gfile, inflated by zlib."""
    import tensorflow as tf

    def one(path: str) -> tuple[str, int]:
        digest, unzip = hashlib.sha256(), zlib.decompressobj(16 + 15)
        pending, records = b"", 0
        with tf.io.gfile.GFile(path, "rb") as f:
            while chunk := f.read(PIECE):
                digest.update(chunk)
                pending += unzip.decompress(chunk)
                at = 0
                while len(pending) - at >= 12:
                    (length,) = struct.unpack_from("<Q", pending, at)
                    if len(pending) - at < 12 + length + 4:
                        break
                    at += 12 + length + 4
                    records += 1
                pending = pending[at:]
        return digest.hexdigest(), records

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(one, paths))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=400_000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--record", action="store_true", help=f"append the table to {RESULTS}")
    args = p.parse_args(argv)

    from tests.trainer.datasets import make_rows, write_dataset
    from trainer.dataset.manifest import load_manifest
    from trainer.dataset.verify import verify_shards

    with tempfile.TemporaryDirectory() as tmp:
        written = write_dataset(Path(tmp) / "d", make_rows(args.records), splits={"train": 8})
        manifest = load_manifest(str(written.root))
        paths = manifest.split_files("train")
        size = sum(Path(p).stat().st_size for p in paths)
        ways = {
            "floor: read + sha256": lambda: floor(paths),
            "tf.io.gfile + zlib (before)": lambda: through_gfile(paths),
            "verify_shards (now)": lambda: verify_shards(manifest),
        }
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.repeats):
            for name, way in ways.items():  # interleaved: the machine's noise shared
                start = time.perf_counter()
                way()
                times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(t) for name, t in times.items()}
    base = medians["floor: read + sha256"]
    ratio = medians["verify_shards (now)"] / medians["tf.io.gfile + zlib (before)"]
    rows = ["| way | median s | MB/s | × floor |", "|---|---:|---:|---:|"]
    for name, took in medians.items():
        rows.append(f"| {name} | {took:.3f} | {size / took / 1e6:,.0f} | {took / base:.2f} |")
    table = "\n".join(rows)
    print(table)
    if args.record:
        append_results(
            RESULTS,
            "the shards checked against the manifest before a run",
            [
                command_line("benchmarks/shard_verify.py", argv),
                machine_facts(),
                f"{args.records:,} penguins-like records, 8 gzip shards, {size / 1e6:.1f} MB",
            ],
            table,
            [
                f"median of {args.repeats} interleaved runs; verify_shards over the tf.io.gfile "
                f"check: {ratio:.2f}×",
            ],
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
