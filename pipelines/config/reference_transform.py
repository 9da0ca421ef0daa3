"""The reference of the `transform:` section and of its declarative ops
(`pipelines.config.reference`); `pipelines.config.transform` checks the op parameters with
`pipelines.config.reference.op_params`."""

from __future__ import annotations

from pipelines.config.reference_keys import REQUIRED, Key, Part
from transforms.contract.config import MATERIALIZE, TRANSFORM_OPS


def _applies(op: str) -> str:
    return f"For {', '.join(TRANSFORM_OPS[op][1])} features."


TRANSFORM = Part(
    title="Transform",
    path="transform",
    intro=(
        "tf.Transform preprocessing: the ETL analyzes the `train` split (the config needs "
        "one) and writes the transform graph beside the shards; the trainer and the exported "
        "model apply it. Give either `features` or `module`."
    ),
    keys=(
        Key(
            "features",
            "mapping",
            "Declarative ops per feature (see Transform ops). Features without ops pass "
            "through unchanged; the label takes none.",
            {"bill_length_mm": "z_score"},
            length=(1, None),
        ),
        Key(
            "features.<name>",
            "op or list of ops",
            "One op, or a list of ops run in order: `fill_missing`, then `log1p`, then one of "
            "the others.",
            [{"fill_missing": 0}, "log1p", "z_score"],
            nullable=False,
        ),
        Key(
            "module",
            "string",
            "A local Python file (relative to the config's folder) that defines "
            "`preprocessing_fn(inputs) -> dict`.",
            "prep.py",
            pattern=r"\.py$",
        ),
        Key(
            "materialize",
            "string",
            "What the shards hold: `raw` examples (the trainer applies the transform) or the "
            "`transformed` ones.",
            "transformed",
            default="raw",
            allowed=MATERIALIZE,
        ),
    ),
    example="""\
transform:
  materialize: raw
  features:
    bill_length_mm: z_score
    body_mass_g: [{fill_missing: 4000}, log1p, z_score]
    island: {vocabulary: {top_k: 100, num_oov_buckets: 1}}
""",
)

# The maxima of the op parameters bound the ids the trainer one-hot encodes or embeds per feature;
# `vocabulary.num_oov_buckets` is at least 1 because unknown values need an id (a model cannot
# embed -1). pipelines.config.transform checks the parameters with these (`op_params`).
OPS = Part(
    title="Transform ops",
    path="transform.features.<name>",
    kind="ops",
    intro=(
        "An op is its name (`z_score`) or a one-key mapping `{op: parameters}`; a feature "
        "takes one op or a list of them. The order is fixed: `fill_missing`, then `log1p` "
        "(before `z_score`, `scale_to_0_1` or `bucketize` only), then one of the other ops."
    ),
    keys=(
        Key(
            "fill_missing",
            "scalar",
            "The value of the feature's type that replaces a missing one. "
            + _applies("fill_missing"),
            0,
            nullable=False,
        ),
        Key("log1p", "no parameters", "float32 `log(1 + x)`. " + _applies("log1p"), {}),
        Key(
            "z_score",
            "no parameters",
            "float32 `(x - mean) / std` over the train split. " + _applies("z_score"),
            {},
        ),
        Key(
            "scale_to_0_1",
            "no parameters",
            "float32 `(x - min) / (max - min)` over the train split. " + _applies("scale_to_0_1"),
            {},
        ),
        Key(
            "bucketize",
            "mapping",
            "int64 quantile bucket in `[0, num_buckets)`. " + _applies("bucketize"),
            {"num_buckets": 4},
            nullable=False,
        ),
        Key(
            "bucketize.num_buckets",
            "integer",
            "How many buckets.",
            4,
            default=REQUIRED,
            minimum=2,
            maximum=100_000,
        ),
        Key(
            "vocabulary",
            "mapping",
            "int64 id by decreasing train frequency; unknown values get out-of-vocabulary "
            "ids. " + _applies("vocabulary"),
            {"top_k": 100},
        ),
        Key(
            "vocabulary.top_k",
            "integer",
            "Keep the most frequent values only.",
            100,
            default_text="all",
            minimum=1,
            maximum=100_000_000,
        ),
        Key(
            "vocabulary.num_oov_buckets",
            "integer",
            "Ids for values not in the vocabulary.",
            2,
            default=1,
            minimum=1,
            maximum=1_000_000,
        ),
        Key(
            "vocabulary.frequency_threshold",
            "integer",
            "Keep values seen at least this many times.",
            5,
            default_text="none",
            minimum=1,
            maximum=2**63 - 1,
        ),
        Key(
            "hash",
            "mapping",
            "int64 `FarmHash64(value) mod buckets`; no analysis. " + _applies("hash"),
            {"buckets": 64},
            nullable=False,
        ),
        Key(
            "hash.buckets",
            "integer",
            "How many buckets.",
            64,
            default=REQUIRED,
            minimum=1,
            maximum=100_000_000,
        ),
        Key(
            "decode_resize",
            "list of integers",
            "`[height, width]`: float32 `[height, width, 3]` decoded as RGB, scaled to [0, 1] "
            "and resized. " + _applies("decode_resize"),
            [64, 64],
            minimum=1,
            maximum=4096,
            length=(2, 2),
            nullable=False,
        ),
    ),
    example="""\
transform:
  features:
    bill_length_mm: z_score
    body_mass_g: [{fill_missing: 4000}, log1p, {bucketize: {num_buckets: 8}}]
    island: {vocabulary: {top_k: 100, num_oov_buckets: 1}}
    sex: {hash: {buckets: 8}}
""",
)
