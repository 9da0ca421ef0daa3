"""The tf.data input pipeline over a split's TFRecord shards.

The shape follows the Model Garden reader: shuffle the file list, shard it per worker, interleave
the files, shuffle serialized records, repeat, batch, then parse the whole batch at once with the
vectorized tf.io.parse_example (per-record parsing is several times slower), and prefetch. With
`deterministic` on several workers, no worker shards: each reads the single process's stream and
keeps its replicas' batches of every step, so that the run trains as one process would.

One change makes it several times faster on few cores: records travel in runs of `read_batch`
(default 32) from the file readers to the batcher. Each file yields runs of consecutive records;
the interleave and the shuffle buffer move runs, not records, so their per-element cost (a
thread hand-off each, ~100 µs here) is paid once per run; `rebatch` cuts the runs into batches
with one copy. Shards written by shardflow hold their records in a pseudo-random order (sorted by
a hash of the record), so a run of consecutive records is already a random sample, and shuffling
runs mixes as well as shuffling records. For data in a meaningful order, `read_batch=1` shuffles
record by record.

A second change makes later epochs of a dataset that fits in memory nearly free: with the INPUTS
cache, each run is parsed and preprocessed once, in the first epoch, and the model inputs are
kept; later epochs only shuffle the runs and cut them into batches (trainer.keras.plan chooses it).

With `deterministic=True` and a fixed seed, two runs yield the same examples in the same order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

import tensorflow as tf

from trainer.config import DEFAULT_READ_BATCH, DEFAULT_SHUFFLE_BUFFER

AUTOTUNE = tf.data.AUTOTUNE
AUTO_CYCLE_LENGTH = 16
INPUTS = "inputs"  # cache: the model inputs, parsed and preprocessed, in memory


def default_cycle_length(files: int) -> int:
    """Files read at once: one per core, at least 4 (remote reads wait more than they work)."""
    return max(1, min(files, AUTO_CYCLE_LENGTH, max(4, os.cpu_count() or 1)))


def input_batches(
    files: Sequence[str],
    spec: Mapping[str, tf.io.FixedLenFeature | tf.io.RaggedFeature],
    compression: str,
    batch_size: int,
    *,
    split: str = "train",
    shuffle: bool = True,
    seed: int = 0,
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
    deterministic: bool = False,
    repeat: bool = False,
    cache: bool | str = False,
    drop_remainder: bool = False,
    input_context: tf.distribute.InputContext | None = None,
    label: str | None = None,
    preprocess: Callable[[dict], dict] | None = None,
    label_fn: Callable[[tf.Tensor], tf.Tensor] | None = None,
    skip_corrupt: bool = False,
    read_batch: int = DEFAULT_READ_BATCH,
    cycle_length: int | None = None,
    block_length: int = 1,
    ram_budget_bytes: int | None = None,
    skip_batches: int = 0,
    labelled_only: bool = False,
    class_weights: Sequence[float] | None = None,
    holdout: tuple[int, bool] | None = None,
) -> tf.data.Dataset:
    """Batches of parsed examples from TFRecord `files`.

    `compression` is a TFRecordDataset compression_type (GZIP, ZLIB or ''). `batch_size` is the
    batch this pipeline yields: under tf.distribute, the per-replica batch. Yields `features`
    or, when `label` names a key of `spec`, `(features, label)`; `preprocess` maps the parsed
    features (label removed) and `label_fn` the label tensor. With `skip_corrupt`, a read error
    in a file (CRC mismatch, truncation, bad compressed data) ends that file instead of the
    pipeline: the rest of the file is skipped (trainer.keras.integrity counts what is lost).

    `cache`: False/"none", True/"memory" (serialized records, in RAM), a file path prefix
    (serialized, on disk) or INPUTS (the parsed and preprocessed model inputs, in RAM: for
    inputs of fixed shapes only); the first pass fills it, later epochs read it instead of the
    files.
    `read_batch` records move together (see the module's doc), `shuffle_buffer` counts records;
    `cycle_length` files are read at once (default: `default_cycle_length`), `block_length` runs
    taken from each in turn. `ram_budget_bytes` caps what tf.data's autotuner may buffer.
    `skip_batches` batches are left out at the start (read but not parsed): a resumed run
    starts where the run it resumes stopped. With `labelled_only`, records without the label
    (an optional label) are left out, a run of records at a time, before batching.
    `class_weights` (per class index) makes the elements (features, label, weight).
    `holdout=(n, True)` keeps only every n-th record of each file (its first, (n+1)-th, ...),
    `(n, False)` all others: a validation slice of a split, the same on every run.
    """
    if not files:
        raise ValueError(f"split {split!r}: no files to read")
    if batch_size < 1:
        raise ValueError(f"batch size must be positive, got {batch_size}")
    if read_batch < 1:
        raise ValueError(f"read batch must be positive, got {read_batch}")
    if label is not None and label not in spec:
        raise ValueError(f"label {label!r} is not in the parse spec")
    files = list(files)
    spec = dict(spec)

    ds = tf.data.Dataset.from_tensor_slices(files)
    if shuffle:
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    record_shards = 1
    # --deterministic on several workers: each reads the one stream a single worker reads, and
    # keeps its replicas' batches of each step (below): the run trains on the batches, in the
    # order, of the same run on one device.
    pipelines = 1 if input_context is None else input_context.num_input_pipelines
    whole_stream = reads_whole_split(deterministic, pipelines) and drop_remainder
    if pipelines > 1 and not whole_stream:
        assert input_context is not None
        index = input_context.input_pipeline_id
        if len(files) >= pipelines:
            ds = ds.shard(pipelines, index)
        else:
            # Fewer files than workers: every worker reads all files and keeps every n-th record.
            record_shards = pipelines

    def read(path: tf.Tensor) -> tf.data.Dataset:
        records = tf.data.TFRecordDataset(path, compression_type=compression)
        # Per file, so an error drops only the rest of its own file.
        if skip_corrupt:
            records = records.ignore_errors()
        if holdout is not None:
            every, take = holdout
            records = (
                records.enumerate()
                .filter(lambda i, _: tf.equal(i % every == 0, take))
                .map(lambda _, record: record)
            )
        return records if record_shards > 1 else records.batch(read_batch)

    ds = ds.interleave(
        read,
        cycle_length=cycle_length or default_cycle_length(len(files)),
        block_length=block_length,
        num_parallel_calls=AUTOTUNE,
        # Sharding records needs the same record order on every worker. A cache filled by a
        # non-deterministic parallel interleave gave some records twice in a later epoch (seen
        # here in 3 runs of 10 with two files): a cache is filled in file order.
        deterministic=deterministic or record_shards > 1 or bool(cache),
    )
    if record_shards > 1:
        assert input_context is not None  # records are sharded only across its pipelines
        ds = ds.shard(record_shards, input_context.input_pipeline_id).batch(read_batch)
    if labelled_only and label is not None:

        def labelled(runs: tf.Tensor) -> tf.Tensor:
            """The records of a run that hold the label."""
            found = tf.io.parse_example(runs, {label: spec[label]})[label]
            return tf.boolean_mask(runs, found.row_lengths() > 0)

        ds = ds.map(labelled, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    weights = None if class_weights is None else tf.constant(class_weights, tf.float32)

    def parse(serialized: tf.Tensor):
        features = tf.io.parse_example(serialized, spec)
        target = features.pop(label) if label is not None else None
        if isinstance(target, tf.RaggedTensor):  # an optional label: one value a record here
            target = target.flat_values
        if preprocess is not None:
            features = preprocess(features)
        if label is None:
            return features
        target = label_fn(target) if label_fn is not None else target
        if weights is None:
            return features, target
        return features, target, tf.gather(weights, target)

    if cache == INPUTS:
        # parsed and preprocessed once, run by run (cut runs are slices that TensorFlow then
        # reports, record by record): later epochs only shuffle the runs and batch them
        ds = ds.map(parse, num_parallel_calls=AUTOTUNE, deterministic=True).cache()
    elif cache:
        ds = ds.cache() if cache in (True, "memory") else ds.cache(str(cache))
    if shuffle:
        runs = max(1, -(-shuffle_buffer // read_batch))
        ds = ds.shuffle(runs, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    ds = ds.rebatch(batch_size, drop_remainder=drop_remainder)
    if whole_stream:
        assert input_context is not None
        replicas = input_context.num_replicas_in_sync
        local = replicas // input_context.num_input_pipelines
        if skip_batches:
            ds = ds.skip(skip_batches * replicas)
        # a step's batches, one per replica in order; this worker's replicas' run of them
        ds = ds.batch(local, drop_remainder=True)
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        ds = ds.unbatch()
    elif skip_batches:
        ds = ds.skip(skip_batches)
    if cache != INPUTS:
        ds = ds.map(parse, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    return ds.with_options(data_options(deterministic, ram_budget_bytes)).prefetch(AUTOTUNE)


def reads_whole_split(deterministic: bool, pipelines: int) -> bool:
    """Whether each of `pipelines` input pipelines reads the whole split (and keeps its
    replicas' batches of every step): with `deterministic` on several workers."""
    return deterministic and pipelines > 1


def data_options(deterministic: bool, ram_budget_bytes: int | None = None) -> tf.data.Options:
    """The tf.data options of every input pipeline, set on purpose."""
    options = tf.data.Options()
    options.deterministic = deterministic
    options.autotune.enabled = True
    if ram_budget_bytes:
        options.autotune.ram_budget = int(ram_budget_bytes)
    # Ops inside a map run on one thread each: the pipeline's parallelism comes from tf.data's
    # own parallel calls, and ops spreading over every core would fight them (and the model).
    options.threading.max_intra_op_parallelism = 1
    # Sharding is done above, by file; keep tf.distribute from sharding again.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return options
