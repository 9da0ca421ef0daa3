"""Benchmark: a GPU fed from a shardflow dataset by the PyTorch and JAX readers (trainer.readers).

Three steps, two machines. Here (the project's venv: the ETL needs Beam) `make` builds the two
datasets with the real ETL and gathers what the GPU machine lacks; there (PyTorch, JAX and CUDA,
no TensorFlow, no Beam) `run` measures and writes one JSON file; here again, `record` appends it
to benchmarks/RESULTS.md.

  python benchmarks/gpu_feed.py make [--rows 200000] [--images 1200] [--into .device/feed]
  # on the GPU machine, .device/feed carried (the device tool: carry [".device/feed"]):
  bash .device/feed/setup.sh && export PYTHONPATH=$(cat .device/feed/pythonpath) &&
    python3 benchmarks/gpu_feed.py run --into .device/feed --out $OUT/gpu_feed.json
  python benchmarks/gpu_feed.py record gpu_feed.json

The datasets:
  tabular  the 15-column keyed orders export of benchmarks/etl_csv.py (9 numeric columns, six
           strings, optional values missing), gzip shards; every feature is decoded and, the
           strings as vocabulary ids, moved to the GPU.
  images   generated JPEGs of IMAGE_SIDE x IMAGE_SIDE in CLASSES class folders (the label from
           the folder), uncompressed shards (JPEGs do not compress), `image_size` IMAGE_SIZE:
           decoded on the host (and resized, when the sizes differ).

What `run` measures, examples/s delivered into GPU memory (a batch counts once its tensors are
on the device; time starts at the first batch, so worker start-up is left out, and each variant
runs for --seconds):
  floor      the parse floor: tfx-bsl's C++ decoder on batches of serialized records held in
             memory, all columns, no conversion or transfer, in N processes at once.
  naive      what a third-party TFRecord reader does: a torch IterableDataset that reads frames
             and parses each record with protobuf in Python into a dict of numpy values, collated
             by the DataLoader; N loader workers.
  torch      trainer.readers.torch_loader with N loader workers (N = 1, 4, 8, 16).
  jax        trainer.readers.jax_batches (one process; its threads read and decode).
  step       the model's own rate: one batch held on the GPU, stepped over and over (an MLP on
             the tabular data; a ResNet-18-shaped CNN in bf16 on the images).
  train      the model trained from the torch loader: examples/s, and how busy the GPU was, as
             the sum of each step's GPU time (CUDA events) over the wall time, and as the mean
             of nvidia-smi's utilization samples.
  cores      beside each loader row: how busy each loader worker was, the training process's
             cores, the machine's busy fraction (/proc).
  threads    (--only threads) torch_loader at 8, 12 and 16 workers, each worker on threads
             (reading, two decoding) or on one, in turns, twice: where threads pay.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

TABULAR_BATCH = 1024
IMAGE_BATCH = 256
IMAGE_SIDE, IMAGE_SIZE, CLASSES = 224, 224, 4  # JPEGs of 224x224, learned at that size
TABULAR_COPIES, IMAGE_COPIES = 4, 32
WORKERS = (1, 4, 8, 16)
THREAD_WORKERS = (8, 12, 16)  # --only threads: loader workers on threads or not, in turns
FLOOR_WORKERS = (1, 16)
# What the GPU machine lacks for the readers, as cp312 wheels (it has numpy, pyarrow, pillow,
# pyyaml, absl-py, torch and jax; its protobuf 7 is newer than tensorflow-metadata's code).
WHEELS = (
    "tfx-bsl==1.21.0",
    "tensorflow-metadata==1.21.0",
    "google-crc32c==1.9.0",
    "protobuf==6.33.6",
    "isal==1.9.1",
    "simplejpeg==1.9.0",
)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any")


# --- make (here) ------------------------------------------------------------------------------


def make(into: Path, rows: int, images: int, seed: int) -> None:
    """The two datasets, built with the ETL, and the wheels, in `into`."""
    from benchmarks.etl_csv import DATA, generate_keyed

    into.mkdir(parents=True, exist_ok=True)
    work = into / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    generate_keyed(DATA["keyed"], work, rows, seed, newline_rate=0.01)
    _etl(work, "tabular", _tabular_config(rows), into)
    _draw_images(work / "pictures", images, seed)
    _etl(work, "images", _image_config(), into)
    shutil.rmtree(work)
    whl = into / "whl"
    shutil.rmtree(whl, ignore_errors=True)
    platforms = [a for p in PLATFORMS for a in ("--platform", p)]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
         "--python-version", "3.12", "--implementation", "cp", *platforms, "-d", str(whl),
         *WHEELS],
        check=True,
    )  # fmt: skip
    (into / "setup.sh").write_text(
        "# On the GPU machine: installs the carried wheels into /tmp/feed-site.\n"
        "set -e\n"
        'd=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)\n'
        "python3 -m pip install -q --no-index --no-deps --no-compile --upgrade "
        "--target /tmp/feed-site $d/whl/*.whl\n"
        'echo "/tmp/feed-site:$(cd $d/../.. && pwd)" > $d/pythonpath\n'
    )
    sizes = {p.name: _size(p) for p in sorted(into.iterdir())}
    print(f"made {into}: " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sizes.items()))


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _tabular_config(rows: int) -> str:
    from benchmarks.etl_csv import KEYED_COLUMNS

    features = "\n".join(
        f"  {c.name}: {{type: {c.kind}{'' if c.required else ', required: false'}}}"
        for c in KEYED_COLUMNS
    )
    # about 110 bytes a record once compressed: 64 train shards
    shard_mb = max(0.05, rows * 110 * 0.9 / 64 / 2**20)
    return (
        "name: tabular\n"
        "sources: [{name: orders, format: csv, path: orders.csv}]\n"
        "key: id\n"
        f"features:\n{features}\n"
        "splits: {train: 0.9, eval: 0.1}\n"
        f"output: {{path: tabular, compression: gzip, shard_size_mb: {shard_mb:.3f}}}\n"
    )


def _image_config() -> str:
    return (
        "name: images\n"
        "sources: [{name: pictures, format: images, path: pictures}]\n"
        "features:\n"
        f"  image: {{type: image, image_size: [{IMAGE_SIZE}, {IMAGE_SIZE}]}}\n"
        "  label: {type: string}\n"
        "label: label\n"
        "splits: {train: 0.9, eval: 0.1}\n"
        "output: {path: images, compression: none, shard_size_mb: 1}\n"
    )


def _etl(work: Path, name: str, config: str, into: Path) -> None:
    from pipelines import etl

    (work / f"{name}.yaml").write_text(config)
    if etl.run(["--config", str(work / f"{name}.yaml")]) != 0:
        raise SystemExit(f"the ETL of the {name} dataset failed")
    shutil.rmtree(into / name, ignore_errors=True)
    shutil.move(str(work / name), str(into / name))


def _draw_images(folder: Path, count: int, seed: int) -> None:
    """`count` seeded JPEGs (quality 90): each class its own colour balance and stripes."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:IMAGE_SIDE, :IMAGE_SIDE].astype(np.float32)
    for i in range(count):
        label = i % CLASSES
        (folder / f"class{label}").mkdir(parents=True, exist_ok=True)
        tilt = (label + 1) / CLASSES
        phase = rng.uniform(0, 6.3, 3)
        wave = np.sin((x + tilt * y)[..., None] / rng.uniform(4, 16) + phase)
        tint = np.array([label, CLASSES - label, 2], np.float32) * 30
        pixels = np.clip(90 + tint + 80 * wave + rng.normal(0, 14, wave.shape), 0, 255)
        buffer = io.BytesIO()
        Image.fromarray(pixels.astype(np.uint8)).save(buffer, "JPEG", quality=90)
        (folder / f"class{label}" / f"{i:06d}.jpg").write_bytes(buffer.getvalue())


# --- the baselines ------------------------------------------------------------------------------


def example_class() -> Any:
    """tf.train.Example's message class, from its descriptor (no TensorFlow needed)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(name="feed_example.proto", package="feedbench")
    F = descriptor_pb2.FieldDescriptorProto

    repeated, optional = F.LABEL_REPEATED, F.LABEL_OPTIONAL
    for name, kind in (("BytesList", F.TYPE_BYTES), ("FloatList", F.TYPE_FLOAT),
                       ("Int64List", F.TYPE_INT64)):  # fmt: skip
        field = proto.message_type.add(name=name).field.add(
            name="value", number=1, type=kind, label=repeated
        )
        if kind != F.TYPE_BYTES:
            field.options.packed = True
    feature = proto.message_type.add(name="Feature")
    for number, (field, type_name) in enumerate(
        (("bytes_list", "BytesList"), ("float_list", "FloatList"), ("int64_list", "Int64List")), 1
    ):
        feature.field.add(
            name=field, number=number, type=F.TYPE_MESSAGE, label=optional,
            type_name=f".feedbench.{type_name}", oneof_index=0,
        )  # fmt: skip
    feature.oneof_decl.add(name="kind")
    features = proto.message_type.add(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=optional)
    entry.field.add(
        name="value", number=2, type=F.TYPE_MESSAGE, label=optional,
        type_name=".feedbench.Feature",
    )  # fmt: skip
    features.field.add(
        name="feature", number=1, type=F.TYPE_MESSAGE, label=repeated,
        type_name=".feedbench.Features.FeatureEntry",
    )  # fmt: skip
    example = proto.message_type.add(name="Example")
    example.field.add(
        name="features", number=1, type=F.TYPE_MESSAGE, label=optional,
        type_name=".feedbench.Features",
    )  # fmt: skip
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("feedbench.Example"))


def per_record_dataset(paths: list[str], features: dict[str, Any]) -> Any:
    """The naive reader: a torch IterableDataset of one dict of numpy values per record (a
    missing number 0, a missing string b""), read frame by frame and parsed one record at a
    time, its files dealt to the loader workers."""
    import gzip

    import torch

    kinds = {name: feature.type for name, feature in features.items()}

    class PerRecord(torch.utils.data.IterableDataset):
        def __iter__(self) -> Iterator[dict]:
            Example = example_class()
            info = torch.utils.data.get_worker_info()
            mine = paths if info is None else paths[info.id :: info.num_workers]
            while True:
                for path in mine:
                    with gzip.open(path, "rb") as f:
                        while header := f.read(12):
                            (length,) = struct.unpack("<Q", header[:8])
                            record = f.read(length + 4)[:-4]
                            example = Example.FromString(record)
                            yield {
                                name: _value(example.features.feature[name], kind)
                                for name, kind in kinds.items()
                            }

    return PerRecord()


def _value(feature: Any, kind: str) -> Any:
    if kind == "int":
        values = feature.int64_list.value
        return np.int64(values[0] if values else 0)
    if kind == "float":
        values = feature.float_list.value
        return np.float32(values[0] if values else 0.0)
    values = feature.bytes_list.value
    return values[0] if values else b""


def _records(dataset: Any, shards: Iterable[Any]) -> list[bytes]:
    """The serialized records of `shards`, read into memory."""
    from trainer.dataset.framing import read_shard

    return [r for s in shards for run in read_shard(s, dataset.wbits) for r in run]


def tight_loop(root: str, seconds: float) -> float:
    """Examples/s of a tight per-record protobuf loop, one process: records held in memory,
    each parsed with Example.FromString and its numbers read into numpy arrays a batch long."""
    from trainer.dataset.union import load_datasets

    dataset = load_datasets(root)
    records = _records(dataset, dataset.shards("train")[:64])
    numbers = [(n, f.type) for n, f in dataset.features.items() if f.type in ("int", "float")]
    Example = example_class()
    start, done = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        for at in range(0, len(records) - TABULAR_BATCH + 1, TABULAR_BATCH):
            columns: dict[str, list] = {n: [] for n, _ in numbers}
            for record in records[at : at + TABULAR_BATCH]:
                feature = Example.FromString(record).features.feature
                for name, kind in numbers:
                    values = (feature[name].int64_list if kind == "int" else
                              feature[name].float_list).value  # fmt: skip
                    columns[name].append(values[0] if values else 0)
            for name, kind in numbers:
                np.asarray(columns[name], np.int64 if kind == "int" else np.float32)
            done += TABULAR_BATCH
    return done / (time.perf_counter() - start)


def transport_dataset(root: str, batch: int, workers: int) -> Any:
    """A torch IterableDataset whose workers hand over one batch decoded once, packed anew into
    their blocks each time (trainer.readers.transport.Packed, crossing as torch_loader's do):
    the DataLoader's own ceiling for this batch, with no reading or decoding."""
    import torch

    from trainer.readers.stream import Reader
    from trainer.readers.transport import Blocks, Crossing, Packed

    class Transport(torch.utils.data.IterableDataset):
        def __init__(self) -> None:
            self.crossing = Crossing(workers)

        def __iter__(self) -> Iterator[Any]:
            info = torch.utils.data.get_worker_info()
            reader = Reader(root, "train", batch)
            decoded = reader.decode(next(reader.record_batches(reader.layout(), 0)))
            blocks = Blocks(self.crossing, 0 if info is None else info.id)
            while True:
                yield Packed.of(decoded, blocks)

    return Transport()


def _floor_worker(args: tuple) -> tuple[int, float, float]:
    """One process of the parse floor: its shards' records read into memory, then decoded a
    batch at a time for `seconds` from the shared start (tfx-bsl, all columns)."""
    root, shard_slice, batch, seconds, barrier = args
    from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder

    from trainer.dataset.union import load_datasets
    from trainer.readers.decode import schema_of

    dataset = load_datasets(root)
    records = _records(dataset, dataset.shards("train")[shard_slice])
    batches = [records[i : i + batch] for i in range(0, len(records), batch)]
    decoder = ExamplesToRecordBatchDecoder(schema_of(dataset.features))
    decoder.DecodeBatch(batches[0])
    barrier.wait()
    start = time.perf_counter()
    done = 0
    while time.perf_counter() - start < seconds:
        for b in batches:
            decoder.DecodeBatch(b)
            done += len(b)
    return done, start, time.perf_counter()


def parse_floor(root: str, processes: int, batch: int, seconds: float) -> float:
    """Examples/s of `processes` processes decoding at once (each its share of the shards)."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(processes)
        jobs = [
            (root, slice(i, None, processes), batch, seconds, barrier) for i in range(processes)
        ]
        with context.Pool(processes) as pool:
            results = pool.map(_floor_worker, jobs)
    total = sum(n for n, _, _ in results)
    return total / (max(e for _, _, e in results) - min(s for _, s, _ in results))


def worker_phases(root: str, seconds: float) -> dict[str, float]:
    """A loader worker's work, in this process, for `seconds`, timed by phase: reading (files,
    inflating, unframing, shuffling), decoding (tfx-bsl and the arrays), packing into a block;
    and tfx-bsl alone on the same records. Microseconds per record. (One process only: many at
    once time each other's cache misses, not the work.)"""
    from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder

    from trainer.readers.decode import schema_of
    from trainer.readers.stream import Reader
    from trainer.readers.transport import Blocks, Crossing, Packed

    reader = Reader(root, "train", TABULAR_BATCH)
    crossing = Crossing(1)
    blocks = Blocks(crossing, 0)
    tfx = ExamplesToRecordBatchDecoder(schema_of(reader.manifest.features))
    spent = dict.fromkeys(("read", "decode", "pack", "tfx_bsl"), 0.0)
    batches = reader.record_batches(reader.layout(), 0)
    start, done = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        records = next(batches, None)
        if records is None:
            break
        t1 = time.perf_counter()
        batch = reader.decode(records, images=False)
        t2 = time.perf_counter()
        crossing.released[0] = Packed.of(batch, blocks, reader).number  # taken at once
        t3 = time.perf_counter()
        tfx.DecodeBatch(records)
        t4 = time.perf_counter()
        for phase, took in zip(spent, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            spent[phase] += took
        done += len(records)
    return {phase: took / done * 1e6 for phase, took in spent.items()}


# --- delivering into GPU memory -----------------------------------------------------------------


def _to_device(batch: dict, device: Any) -> dict:
    """The batch's tensors on `device` (those already there as they are: a training loop would
    not move them again)."""
    return {
        k: v if v.device.type == device.type else v.to(device, non_blocking=True)
        for k, v in batch.items()
        if hasattr(v, "to")
    }


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


class Cores:
    """Where the cores went over a span (Linux /proc; empty elsewhere): the machine's busy
    fraction, and the CPU-seconds per second of this process (the training process, all its
    threads) and of each process in `workers` (a loader's workers)."""

    def __init__(self, workers: Iterable[int] = ()) -> None:
        self.workers = [str(pid) for pid in workers]
        self.start = self._now()

    @staticmethod
    def _ticks(pid: str) -> int | None:
        """User + system clock ticks of process `pid` so far."""
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            return None
        return int(fields[11]) + int(fields[12])

    def _now(self) -> dict | None:
        try:
            with open("/proc/stat") as f:
                ticks = [int(v) for v in f.readline().split()[1:]]
        except OSError:
            return None
        workers = {pid: self._ticks(pid) for pid in self.workers}
        return {
            "time": time.perf_counter(), "all": sum(ticks), "idle": ticks[3] + ticks[4],
            "own": sum(os.times()[:2]), "workers": workers,
        }  # fmt: skip

    def since(self) -> dict:
        end, start = self._now(), self.start
        if end is None or start is None:
            return {}
        tick = os.sysconf("SC_CLK_TCK")
        wall = end["time"] - start["time"]
        each = {
            int(pid): (ticks - start["workers"][pid]) / tick / wall
            for pid, ticks in end["workers"].items()
            if ticks is not None and start["workers"].get(pid) is not None
        }
        return {
            "machine_busy": 1 - (end["idle"] - start["idle"]) / max(1, end["all"] - start["all"]),
            "training_process": (end["own"] - start["own"]) / wall,
            "worker_mean": statistics.fmean(each.values()) if each else None,
            "workers": len(each),
            "each": each,
        }


def _worker_pids(loader: Any) -> list[int]:
    """The process ids of a DataLoader's (persistent) workers, once it has started them."""
    iterator = getattr(loader, "_iterator", None)
    return [w.pid for w in getattr(iterator, "_workers", ())]


def delivered(batches: Iterable[dict], seconds: float, device: Any, loader: Any = None) -> dict:
    """Examples/s of `batches` moved to the GPU, timed from the first batch for `seconds`;
    where the cores went meanwhile (`Cores`, `loader`'s workers)."""
    it = iter(batches)
    first = _to_device(next(it), device)
    _sync(device)
    cores = Cores(_worker_pids(loader) if loader is not None else ())
    start, examples, steps = time.perf_counter(), 0, 0
    for batch in it:
        on = _to_device(batch, device)
        examples += len(next(iter(on.values())))
        steps += 1
        if steps % 16 == 0 and time.perf_counter() - start >= seconds:
            break
    _sync(device)
    elapsed = time.perf_counter() - start
    del first
    return {"examples_per_s": examples / elapsed, "examples": examples, "seconds": elapsed,
            "cores": cores.since()}  # fmt: skip


def _unpacked(loader: Any, device: Any) -> Iterator[dict]:
    """A DataLoader's packed batches (copied out of their blocks when not pinned), moved to
    `device`, as dicts of views."""
    for packed in loader:
        packed = packed.copied()
        yield packed.unpacked(packed.block.to(device, non_blocking=True))


def epochs(loader: Any) -> Iterator[dict]:
    """A loader's batches, epoch after epoch."""
    while True:
        yield from loader


def jax_delivered(batches: Iterator[dict], seconds: float) -> dict:
    """Examples/s of the JAX iterator (its numbers already put on the device), timed from the
    first batch, waited on at the end."""
    import jax

    first = next(batches)
    jax.block_until_ready([v for v in first.values() if isinstance(v, jax.Array)])
    start, examples, last = time.perf_counter(), 0, first
    for batch in batches:
        examples += len(next(iter(batch.values())))
        last = batch
        if time.perf_counter() - start >= seconds:
            break
    jax.block_until_ready([v for v in last.values() if isinstance(v, jax.Array)])
    elapsed = time.perf_counter() - start
    return {"examples_per_s": examples / elapsed, "examples": examples, "seconds": elapsed}


# --- models -------------------------------------------------------------------------------------


def resnet18(classes: int) -> Any:
    """A ResNet-18-shaped CNN (11.2M parameters at 1000 classes): a 7x7 stem, max pooling,
    four stages of two basic blocks (64, 128, 256, 512 channels), global pooling."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
                )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = torch.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return torch.relu(out + (x if self.down is None else self.down(x)))

    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
    ]  # fmt: skip
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


def mlp(inputs: int) -> Any:
    from torch import nn

    return nn.Sequential(
        nn.Linear(inputs, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
        nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 1),
    )  # fmt: skip


class ImageTask:
    """The CNN's training step on uint8 NHWC pixels (divided by 255 on the GPU, channels last),
    bf16 autocast, SGD with momentum; on CUDA the whole step (forward, backward, optimizer) is
    captured once in a CUDA graph and replayed on static input buffers that each batch is
    copied into, as small fast models are trained: Python launching ~200 kernels a step would
    otherwise bound the step rate, not the GPU. A batch smaller than `batch` (the end of a
    worker's part of an epoch) is not trained on."""

    def __init__(self, device: Any, classes: int, batch: int, size: int):
        import torch

        torch.backends.cudnn.benchmark = True
        self.device = device
        self.model = resnet18(classes).to(device, memory_format=torch.channels_last)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
        self.x = torch.zeros((batch, size, size, 3), dtype=torch.uint8, device=device)
        self.y = torch.zeros(batch, dtype=torch.int64, device=device)
        self.graph = None
        if device.type == "cuda":
            self._capture()

    def _train(self) -> Any:
        import torch

        x = self.x.permute(0, 3, 1, 2).float().div_(255.0)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, cache_enabled=False):
            loss = torch.nn.functional.cross_entropy(self.model(x), self.y)
        loss.backward()
        self.optimizer.step()
        return loss

    def _capture(self) -> None:
        import torch

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up (cuDNN's choices) off the capturing stream
            for _ in range(3):
                self.optimizer.zero_grad(set_to_none=True)
                self._train()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        self.optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            self.loss = self._train()

    def inputs(self, batch: dict) -> tuple[Any, Any]:
        image = batch["image"].to(self.device, non_blocking=True)
        return image, batch["label"].to(self.device, non_blocking=True)

    def step(self, x: Any, y: Any) -> Any:
        if len(y) != len(self.y):
            return None
        self.x.copy_(x, non_blocking=True)
        self.y.copy_(y, non_blocking=True)
        if self.graph is None:
            self.optimizer.zero_grad(set_to_none=True)
            return self._train()
        self.graph.replay()
        return self.loss


class TabularTask:
    """The MLP's step: `amount` regressed from the other columns (numbers standardized by the
    dataset's moments, string ids scaled), bf16 autocast, AdamW."""

    def __init__(self, device: Any, info: Any, names: list[str]):
        import torch

        self.names = [n for n in names if n != "amount" and not n.endswith("__lengths")]
        self.device = device
        known = info.number_moments
        mean = [known[n].mean if n in known else 0.0 for n in self.names]
        std = [known[n].std if n in known else 1000.0 for n in self.names]
        self.mean = torch.tensor(mean, device=device)
        self.std = torch.tensor(std, device=device)
        self.model = mlp(len(self.names)).to(device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)

    def inputs(self, batch: dict) -> tuple[Any, Any]:
        import torch

        on = {n: batch[n].to(self.device, non_blocking=True) for n in [*self.names, "amount"]}
        x = torch.stack([on[n].float() for n in self.names], 1)
        return (x - self.mean) / self.std, on["amount"].float()

    def step(self, x: Any, y: Any) -> Any:
        import torch

        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(self.model(x).squeeze(1).float(), y / 100)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return loss


def model_rate(task: Any, batch: dict, seconds: float) -> dict:
    """Examples/s of the model's steps on one batch held on the GPU."""
    x, y = task.inputs(batch)
    for _ in range(5):
        task.step(x, y)
    _sync(task.device)
    start, steps = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            task.step(x, y)
        steps += 10
        _sync(task.device)
    elapsed = time.perf_counter() - start
    return {"examples_per_s": steps * len(y) / elapsed, "steps": steps, "seconds": elapsed}


class Utilization:
    """nvidia-smi's GPU utilization, sampled every 100 ms while it runs."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []
        self.process = None
        if shutil.which("nvidia-smi"):
            self.process = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                 "-lms", "100", "-i", "0"],
                stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            try:
                self.samples.append((time.perf_counter(), float(line.strip())))
            except ValueError:
                continue

    def mean(self, start: float, end: float) -> float | None:
        inside = [u for t, u in self.samples if start <= t <= end]
        return statistics.fmean(inside) if inside else None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()


def train_rate(task: Any, batches: Iterable[dict], seconds: float, usage: Utilization) -> dict:
    """The model trained from `batches`: examples/s, and the GPU's busy fraction, as the sum of
    the steps' GPU times (CUDA events around each step) over the wall time, and as nvidia-smi's
    mean utilization over the same time; the time spent waiting for the next batch too."""
    import torch

    cuda = task.device.type == "cuda"
    it = iter(batches)
    for _ in range(10):  # warm-up: cuDNN's choice of kernels, the workers' first batches
        task.step(*task.inputs(next(it)))
    _sync(task.device)
    marks: list[tuple[Any, Any]] = []
    start = time.perf_counter()
    examples, waited, steps = 0, 0.0, 0
    while time.perf_counter() - start < seconds:
        before = time.perf_counter()
        batch = next(it)
        waited += time.perf_counter() - before
        x, y = task.inputs(batch)
        if cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
        if task.step(x, y) is None:
            continue  # a partial batch, not trained on
        if cuda:
            end.record()
            marks.append((begin, end))
        steps += 1
        examples += len(y)
    _sync(task.device)
    stop = time.perf_counter()
    gpu = sum(b.elapsed_time(e) for b, e in marks) / 1000 if cuda else math.nan
    elapsed = stop - start
    return {
        "examples_per_s": examples / elapsed,
        "steps": steps,
        "seconds": elapsed,
        "gpu_busy_events": gpu / elapsed,
        "gpu_busy_smi": None if (u := usage.mean(start, stop)) is None else u / 100,
        "input_wait_fraction": waited / elapsed,
    }


# --- run (there) --------------------------------------------------------------------------------


def run(
    into: Path, out: Path, seconds: float, workers: tuple[int, ...], parts: tuple[str, ...]
) -> dict:
    import torch

    from trainer.dataset.union import load_datasets
    from trainer.readers import jax_batches, torch_loader

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type != "cuda":
        print("no CUDA device: a smoke run on the CPU (its numbers mean nothing)", flush=True)
    tabular = _enlarged(into / "tabular", TABULAR_COPIES)
    images = _enlarged(into / "images", IMAGE_COPIES)
    results: dict[str, Any] = {"machine": _machine(), "config": {
        "seconds": seconds, "tabular_batch": TABULAR_BATCH, "image_batch": IMAGE_BATCH,
        "image_side": IMAGE_SIDE, "image_size": IMAGE_SIZE, "classes": CLASSES,
    }}  # fmt: skip
    for name, root in (("tabular", tabular), ("images", images)):
        d = load_datasets(root)
        shards = d.shards("train")
        results[f"{name}_dataset"] = {
            "records": sum(s.records for s in shards),
            "shards": len(shards),
            "bytes": sum(s.bytes or 0 for s in shards),
        }
    save = _saver(out, results)
    usage = Utilization()
    try:
        train_workers = max(1, min(max(workers), os.cpu_count() or 4))
        results["config"]["train_workers"] = train_workers
        if "tabular" in parts:
            # the tabular rows: the floor, the naive reader, the torch loader, JAX
            data = load_datasets(tabular)
            paths = [s.path for s in data.shards("train")]
            for n in FLOOR_WORKERS:
                rate = parse_floor(tabular, n, TABULAR_BATCH, seconds)
                results[f"tabular.floor.{n}"] = {"examples_per_s": rate}
                save(f"tabular.floor.{n}")
            results["tabular.tight.1"] = {"examples_per_s": tight_loop(tabular, seconds)}
            save("tabular.tight.1")
            results["tabular.phases.1"] = worker_phases(tabular, seconds)
            save("tabular.phases.1")
            for n in FLOOR_WORKERS:
                loader = torch.utils.data.DataLoader(
                    transport_dataset(tabular, TABULAR_BATCH, n), batch_size=None, num_workers=n,
                    pin_memory=True, prefetch_factor=2, persistent_workers=True,
                )  # fmt: skip
                results[f"tabular.transport.{n}"] = delivered(
                    _unpacked(loader, device), seconds, device, loader
                )
                del loader
                save(f"tabular.transport.{n}")
            for n in FLOOR_WORKERS:
                loader = torch.utils.data.DataLoader(
                    per_record_dataset(paths, data.features), batch_size=TABULAR_BATCH,
                    num_workers=n, pin_memory=True, prefetch_factor=2, persistent_workers=True,
                )  # fmt: skip
                results[f"tabular.naive.{n}"] = delivered(loader, seconds, device, loader)
                del loader
                save(f"tabular.naive.{n}")
            for n in workers:
                loader = torch_loader(tabular, "train", TABULAR_BATCH, num_workers=n, device=device)
                results[f"tabular.torch.{n}"] = delivered(epochs(loader), seconds, device, loader)
                del loader
                save(f"tabular.torch.{n}")
            n = max(workers)  # batches 4x as large: the training process's share per example
            loader = torch_loader(tabular, "train", 4 * TABULAR_BATCH, num_workers=n, device=device)
            results[f"tabular.torch_x4batch.{n}"] = delivered(
                epochs(loader), seconds, device, loader
            )
            del loader
            save(f"tabular.torch_x4batch.{n}")
            # the MLP: its own rate, then trained from the loader
            loader = torch_loader(
                tabular, "train", TABULAR_BATCH, num_workers=train_workers, device=device
            )
            held = next(iter(loader))
            task = TabularTask(device, loader.info, sorted(held))
            results["tabular.step"] = model_rate(task, held, seconds)
            save("tabular.step")
            results["tabular.train"] = train_rate(task, epochs(loader), seconds, usage)
            save("tabular.train")
            del loader, task, held
        if "images" in parts:
            # the images, as uint8 pixels (the model divides on the GPU); once as float32 too
            for n in workers:
                loader = torch_loader(images, "train", IMAGE_BATCH, num_workers=n, device=device,
                                      image_dtype="uint8")  # fmt: skip
                results[f"images.torch.{n}"] = delivered(epochs(loader), seconds, device, loader)
                del loader
                save(f"images.torch.{n}")
            loader = torch_loader(
                images, "train", IMAGE_BATCH, num_workers=max(workers), device=device
            )
            results["images.torch_float32"] = delivered(epochs(loader), seconds, device)
            del loader
            save("images.torch_float32")
            loader = torch_loader(images, "train", IMAGE_BATCH, num_workers=train_workers,
                                  device=device, image_dtype="uint8")  # fmt: skip
            task = ImageTask(device, CLASSES, IMAGE_BATCH, IMAGE_SIZE)
            held = next(iter(loader))
            results["images.step"] = model_rate(task, held, seconds)
            save("images.step")
            results["images.train"] = train_rate(task, epochs(loader), 2 * seconds, usage)
            save("images.train")
            del loader, task, held
        if "threads" in parts:
            thread_rows(tabular, seconds, device, results, save)
        # JAX last: a DataLoader forked after JAX has started its threads could hang
        if "tabular" in parts:
            results["tabular.jax"] = jax_delivered(
                jax_batches(tabular, "train", TABULAR_BATCH), seconds
            )
            save("tabular.jax")
        if "images" in parts:
            batches = jax_batches(images, "train", IMAGE_BATCH, image_dtype="uint8")
            results["images.jax"] = jax_delivered(batches, seconds)
            save("images.jax")
    finally:
        usage.stop()
    return results


def thread_rows(
    root: str, seconds: float, device: Any, results: dict, save: Callable[[str], None]
) -> None:
    """torch_loader at THREAD_WORKERS workers, each worker reading and decoding on threads
    (`worker_threads`: a reading thread, two decoding) or on one thread, the two in turns,
    twice: whether threads pay at a worker count."""
    from trainer.readers import pytorch as readers
    from trainer.readers import torch_loader

    rule = readers.worker_threads
    try:
        for n in THREAD_WORKERS:
            for turn in range(2):
                for threaded in (False, True):
                    readers.worker_threads = _forced(threaded)  # the workers fork with it
                    loader = torch_loader(root, "train", TABULAR_BATCH, num_workers=n,
                                          device=device)  # fmt: skip
                    key = f"tabular.threads.{n}.{'on' if threaded else 'off'}.{turn}"
                    results[key] = delivered(epochs(loader), seconds, device, loader)
                    del loader
                    save(key)
    finally:
        readers.worker_threads = rule


def _forced(threaded: bool) -> Callable[..., tuple[bool, int]]:
    def rule(workers: int, cpus: int | None = None) -> tuple[bool, int]:
        return (True, 2) if threaded or not workers else (False, 1)

    return rule


def _enlarged(root: Path, times: int) -> str:
    """A copy of the dataset at `root` (in a temporary folder) whose train split holds its
    shards `times` over, as files of their own listed in its manifest: an epoch then gives
    every loader worker many batches, as a dataset of a real size would. Its statistics (the
    vocabularies, classes and moments the readers use) are the original's."""
    import tempfile

    out = Path(tempfile.mkdtemp(prefix=f"feed-{root.name}-")) / root.name
    shutil.copytree(root, out)
    manifest = json.loads((out / "manifest.json").read_text())
    split = manifest["splits"]["train"]
    files = split["files"] * times
    listed = []
    for i, entry in enumerate(files):
        suffix = entry["path"][entry["path"].index(".tfrecord") :]
        name = f"train/train-{i:05d}-of-{len(files):05d}{suffix}"
        shutil.copyfile(root / entry["path"], out / (name + ".new"))
        listed.append({**entry, "path": name})
    for entry in split["files"]:
        (out / entry["path"]).unlink()
    for entry in listed:
        (out / (entry["path"] + ".new")).rename(out / entry["path"])
    split["files"], split["records"] = listed, split["records"] * times
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return str(out)


def _saver(out: Path, results: dict) -> Callable[[str], None]:
    out.parent.mkdir(parents=True, exist_ok=True)

    def save(key: str) -> None:
        out.write_text(json.dumps(results, indent=1))
        value = results[key]
        if "examples_per_s" not in value:  # worker phases: microseconds per record
            print(f"{key:22s} " + ", ".join(f"{k} {v:.2f} us" for k, v in value.items()))
            return
        rate = value["examples_per_s"]
        extra = {k: v for k, v in value.items() if k.startswith(("gpu_", "input_"))}
        print(f"{key:22s} {rate:12,.0f} examples/s {extra or ''}", flush=True)

    return save


def _machine() -> dict:
    import torch

    facts = {
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    for package in ("jax", "numpy", "pyarrow", "tfx_bsl", "google.protobuf", "PIL"):
        try:
            module = __import__(package, fromlist=["__version__"])
            facts[package] = getattr(module, "__version__", "?")
        except ImportError:
            facts[package] = None
    return facts


# --- record (here) ------------------------------------------------------------------------------


def record(path: Path, results_md: Path, command: str, note: str = "") -> str:
    """Appends the run in `path` (run's JSON) to `results_md`; returns its tables."""
    r = json.loads(path.read_text())

    def rate(key: str) -> float:
        return r[key]["examples_per_s"] if key in r else math.nan

    def ratio(a: float, b: float) -> str:
        return "" if math.isnan(a) or math.isnan(b) else f"{a / b:.2f}"

    c = r["config"]

    def tabular_rows() -> list[str]:
        lines = [
            "| tabular (train split), batch 1024 | workers | examples/s | x naive | x tight loop "
            "| x parse floor |",
            "|---|---|---|---|---|---|",
        ]
        tight = rate("tabular.tight.1")
        for n in FLOOR_WORKERS:
            floor = rate(f"tabular.floor.{n}")
            lines.append(
                f"| parse floor: tfx-bsl decoding only, records in memory | {n} | "
                f"{floor:,.0f} | | | 1.00 |"
            )
            if n == 1 and not math.isnan(tight):
                lines.append(
                    f"| tight per-record protobuf loop (9 numbers), records in memory | 1 | "
                    f"{tight:,.0f} | | 1.00 | {ratio(tight, floor)} |"
                )
            transport = rate(f"tabular.transport.{n}")
            if not math.isnan(transport):
                lines.append(
                    f"| DataLoader transport alone: one decoded batch re-sent, to the GPU | "
                    f"{n} | {transport:,.0f} | | | {ratio(transport, floor)} |"
                )
            naive = rate(f"tabular.naive.{n}")
            lines.append(
                f"| naive per-record reader (DataLoader, protobuf per record), to the GPU "
                f"| {n} | {naive:,.0f} | 1.00 | | {ratio(naive, floor)} |"
            )
        for n in sorted({int(k.split(".")[-1]) for k in r if k.startswith("tabular.torch.")}):
            ours, naive = rate(f"tabular.torch.{n}"), rate(f"tabular.naive.{n}")
            floor = rate(f"tabular.floor.{n}")
            versus_tight = ratio(ours, tight) if n == 1 else ""
            lines.append(
                f"| **torch_loader**, to the GPU | {n} | {ours:,.0f} | "
                f"{ratio(ours, naive)} | {versus_tight} | {ratio(ours, floor)} |"
            )
        big = [k for k in r if k.startswith("tabular.torch_x4batch.")]
        for key in big:
            n = int(key.split(".")[-1])
            lines.append(
                f"| torch_loader, batch 4096, to the GPU | {n} | {rate(key):,.0f} | | | "
                f"{ratio(rate(key), rate(f'tabular.floor.{n}'))} |"
            )
        jax = rate("tabular.jax")
        lines.append(
            f"| jax_batches (one process, its threads), to the GPU | 1 | {jax:,.0f} | | | "
            f"{ratio(jax, rate('tabular.floor.1'))} |"
        )
        t = r["tabular.train"]
        lines.append(
            f"| MLP step alone (eager, bf16), batch held on the GPU | | "
            f"{rate('tabular.step'):,.0f} | | | |"
        )
        lines.append(
            f"| MLP trained from torch_loader | {c.get('train_workers', '')} | "
            f"{t['examples_per_s']:,.0f} | | | |"
        )
        return lines

    def phase_rows() -> list[str]:
        lines = [
            "",
            "| a loader worker's work, us per record (one process): processes "
            "| read (files, inflate, unframe, shuffle) | decode (tfx-bsl, then arrays) | pack "
            "| all | tfx-bsl alone | tfx-bsl / all |",
            "|---|---|---|---|---|---|---|",
        ]
        p = r.get("tabular.phases.1")
        if not p:
            return []
        whole = p["read"] + p["decode"] + p["pack"]
        lines.append(
            f"| 1 | {p['read']:.2f} | {p['decode']:.2f} | {p['pack']:.2f} | {whole:.2f} | "
            f"{p['tfx_bsl']:.2f} | {p['tfx_bsl'] / whole:.2f} |"
        )
        return lines

    def image_rows() -> list[str]:
        images = [
            "",
            f"| images ({c['image_side']}x{c['image_side']} JPEGs), batch {c['image_batch']} "
            "| workers | images/s |",
            "|---|---|---|",
        ]
        for n in sorted({int(k.split(".")[-1]) for k in r if k.startswith("images.torch.")}):
            images.append(
                f"| torch_loader, uint8 pixels, to the GPU | {n} | "
                f"{rate(f'images.torch.{n}'):,.0f} |"
            )
        images.append(
            f"| torch_loader, float32 in [0, 1], to the GPU | {max(WORKERS)} | "
            f"{rate('images.torch_float32'):,.0f} |"
        )
        images.append(f"| jax_batches, uint8 (one process) | 1 | {rate('images.jax'):,.0f} |")
        images.append(
            f"| ResNet-18 step alone (bf16, CUDA graph), batch held on the GPU | | "
            f"{rate('images.step'):,.0f} |"
        )
        i = r["images.train"]
        images.append(
            f"| **ResNet-18 trained from torch_loader** | {c.get('train_workers', '')} | "
            f"{i['examples_per_s']:,.0f} |"
        )
        return images

    def core_rows() -> list[str]:
        lines = [
            "",
            f"| where the cores went ({m['cpus']} cores) | workers | examples/s | each worker busy "
            "| training process, cores | machine busy |",
            "|---|---|---|---|---|---|",
        ]
        names = {
            "tabular.naive": "tabular, naive per-record reader",
            "tabular.torch": "tabular, torch_loader",
            "tabular.torch_x4batch": "tabular, torch_loader, batch 4096",
            "images.torch": "images, torch_loader, uint8",
        }
        for key, value in r.items():
            cores = value.get("cores") if isinstance(value, dict) else None
            prefix, _, n = key.rpartition(".")
            if not cores or prefix not in names or not cores.get("worker_mean"):
                continue
            lines.append(
                f"| {names[prefix]} | {n} | {value['examples_per_s']:,.0f} | "
                f"{cores['worker_mean']:.0%} | {cores['training_process']:.2f} | "
                f"{cores['machine_busy']:.0%} |"
            )
        return lines if len(lines) > 3 else []

    def threads_rows() -> list[str]:
        lines = [
            "",
            "| tabular, torch_loader, batch 1024: a worker's threads | workers | one thread, "
            "examples/s | reading + 2 decoding threads | threads / one | each worker busy, "
            "one / threads |",
            "|---|---|---|---|---|---|",
        ]
        for n in THREAD_WORKERS:
            runs = {
                way: [r[k] for k in r if k.startswith(f"tabular.threads.{n}.{way}.")]
                for way in ("off", "on")
            }
            if not runs["off"] or not runs["on"]:
                continue
            off, on = (statistics.median(x["examples_per_s"] for x in runs[w]) for w in runs)
            busy = [
                statistics.median(x["cores"].get("worker_mean") or 0 for x in runs[w]) for w in runs
            ]
            lines.append(
                f"| each way {len(runs['on'])} times, in turns (medians) | {n} | {off:,.0f} | "
                f"{on:,.0f} | {on / off:.2f} | {busy[0]:.0%} / {busy[1]:.0%} |"
            )
        return lines if len(lines) > 3 else []

    m = r["machine"]
    notes = []
    tables = []
    if "tabular.train" in r:
        tables.append("\n".join(tabular_rows() + phase_rows()))
        t = r["tabular.train"]
        notes.append(
            f"The MLP is input-bound: trained from the loader, {t['examples_per_s']:,.0f} "
            f"examples/s, GPU busy {t['gpu_busy_events']:.1%} by events, "
            f"{_pct(t['gpu_busy_smi'])} by nvidia-smi (its eager step launches more than it "
            "computes)."
        )
    if "images.train" in r:
        tables.append("\n".join(image_rows()))
        i = r["images.train"]
        notes.insert(
            0,
            f"GPU busy while the ResNet-18 trained from the loader: "
            f"**{i['gpu_busy_events']:.1%}** by CUDA events (the sum of the steps' GPU times "
            f"over the wall time), **{_pct(i['gpu_busy_smi'])}** by nvidia-smi's utilization "
            f"(mean of 100 ms samples); {i['examples_per_s'] / rate('images.step'):.2f}x the "
            "step rate on a batch held on the GPU; the loop waited for its next batch "
            f"{i['input_wait_fraction']:.1%} of the time (the GPU runs the steps already "
            "queued meanwhile).",
        )
    for rows in (core_rows(), threads_rows()):
        if rows:
            tables.append("\n".join(rows))
    notes += [note] if note else []
    facts = [
        command,
        f"the GPU machine: {m['gpu']}, {m['cpus']} CPUs, Python {m['python']}, torch "
        f"{m['torch']}, jax {m['jax']}, numpy {m['numpy']}, pyarrow {m['pyarrow']}, tfx-bsl "
        f"{m['tfx_bsl']} (carried), protobuf {m['google.protobuf']}, Pillow {m['PIL']}",
        f"tabular: the 15-column keyed orders export of benchmarks/etl_csv.py (9 numeric "
        f"columns, 6 strings as vocabulary ids), gzip, train split {TABULAR_COPIES}x over "
        f"({r['tabular_dataset']['records']:,} records, {r['tabular_dataset']['shards']} "
        f"shards); images: {r['images_dataset']['records']:,} train JPEGs of "
        f"{c['image_side']}x{c['image_side']} ({IMAGE_COPIES}x over, uncompressed shards), "
        f"{c['classes']} classes; each row {c['seconds']:g} s from its first batch",
    ]
    from benchmarks.harness import append_results

    if "tabular.train" not in r and "images.train" in r:  # the images alone (--only images)
        facts[2] = facts[2][facts[2].index("images:") :]
    table = "\n".join(tables)
    append_results(results_md, "GPU feed: trainer.readers on the GPU machine", facts, table, notes)
    return table


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("make", help="here: the datasets (real ETL) and the wheels")
    p.add_argument("--into", type=Path, default=ROOT / ".device" / "feed")
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--images", type=int, default=1200)
    p.add_argument("--seed", type=int, default=7)
    p = sub.add_parser("run", help="on the GPU machine: measure, write JSON")
    p.add_argument("--into", type=Path, default=ROOT / ".device" / "feed")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--workers", default=",".join(map(str, WORKERS)))
    p.add_argument(
        "--only", choices=("tabular", "images", "threads"),
        help="one dataset's rows alone, or a worker's threads on and off (not in a full run)",
    )  # fmt: skip
    p = sub.add_parser("record", help="here: append a run's JSON to RESULTS.md")
    p.add_argument("json", type=Path)
    p.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    p.add_argument("--command-line", default="python benchmarks/gpu_feed.py run")
    p.add_argument("--note", default="")
    args = parser.parse_args(argv)
    if args.command == "make":
        make(args.into.resolve(), args.rows, args.images, args.seed)
    elif args.command == "run":
        workers = tuple(int(w) for w in args.workers.split(","))
        parts = (args.only,) if args.only else ("tabular", "images")
        run(args.into.resolve(), args.out, args.seconds, workers, parts)
    else:
        print(record(args.json, args.results, args.command_line, args.note))
    return 0


if __name__ == "__main__":
    sys.exit(main())
