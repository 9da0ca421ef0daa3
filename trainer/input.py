"""The tf.data input pipeline over a split's TFRecord shards.

The shape follows the Model Garden reader: shuffle the file list, shard it per worker, interleave
the files, shuffle serialized records, repeat, batch, then parse the whole batch at once with the
vectorized tf.io.parse_example (per-record parsing is several times slower), and prefetch.
With `deterministic=True` and a fixed seed, two runs yield the same examples in the same order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import tensorflow as tf

AUTOTUNE = tf.data.AUTOTUNE
DEFAULT_SHUFFLE_BUFFER = 10_000
MAX_CYCLE_LENGTH = 8


def make_dataset(
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
    cache: bool = False,
    drop_remainder: bool = False,
    input_context: tf.distribute.InputContext | None = None,
    label: str | None = None,
    preprocess: Callable[[dict], dict] | None = None,
    label_fn: Callable[[tf.Tensor], tf.Tensor] | None = None,
    skip_corrupt: bool = False,
) -> tf.data.Dataset:
    """Batches of parsed examples from TFRecord `files`.

    `compression` is a TFRecordDataset compression_type (GZIP, ZLIB or ''). `batch_size` is the
    batch this pipeline yields: under tf.distribute, the per-replica batch. Yields `features`
    or, when `label` names a key of `spec`, `(features, label)`; `preprocess` maps the parsed
    features (label removed) and `label_fn` the label tensor. With `skip_corrupt`, a read error
    in a file (CRC mismatch, truncation, bad compressed data) ends that file instead of the
    pipeline: the rest of the file is skipped (trainer.integrity counts what is lost).
    """
    if not files:
        raise ValueError(f"split {split!r}: no files to read")
    if batch_size < 1:
        raise ValueError(f"batch size must be positive, got {batch_size}")
    if label is not None and label not in spec:
        raise ValueError(f"label {label!r} is not in the parse spec")
    files = list(files)
    spec = dict(spec)

    ds = tf.data.Dataset.from_tensor_slices(files)
    if shuffle:
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    record_shards = 1
    if input_context is not None and input_context.num_input_pipelines > 1:
        pipelines, index = input_context.num_input_pipelines, input_context.input_pipeline_id
        if len(files) >= pipelines:
            ds = ds.shard(pipelines, index)
        else:
            # Fewer files than workers: every worker reads all files and keeps every n-th record.
            record_shards = pipelines

    def read(path: tf.Tensor) -> tf.data.Dataset:
        records = tf.data.TFRecordDataset(path, compression_type=compression)
        # Per file, so an error drops only the rest of its own file.
        return records.ignore_errors() if skip_corrupt else records

    ds = ds.interleave(
        read,
        cycle_length=min(len(files), MAX_CYCLE_LENGTH),
        num_parallel_calls=AUTOTUNE,
        # Sharding records needs the same record order on every worker.
        deterministic=deterministic or record_shards > 1,
    )
    if record_shards > 1:
        ds = ds.shard(record_shards, input_context.input_pipeline_id)
    if cache:
        ds = ds.cache()
    if shuffle:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)

    def parse(serialized: tf.Tensor):
        features = tf.io.parse_example(serialized, spec)
        target = features.pop(label) if label is not None else None
        if preprocess is not None:
            features = preprocess(features)
        if label is None:
            return features
        return features, (label_fn(target) if label_fn is not None else target)

    ds = ds.map(parse, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    options = tf.data.Options()
    options.deterministic = deterministic
    # Sharding is done above, by file; keep tf.distribute from sharding again.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return ds.with_options(options).prefetch(AUTOTUNE)
