"""Element logic of the shardflow ETL as plain functions, wrapped by small composite PTransforms.

  contract/   what the ETL and the trainer agree on: config types, layout, manifest (no Beam, no TF)
  sources/    extract: the format registry, one reader per format, byte ranges, `ReadSource`
  (flat)      transform: records, schema, prepare, encode, split, shards, join, stats, quality,
              tf_transform; files (local or gs:// paths) and progress (the counts workers report)
  sink/       load: spill files, TFRecord framing, the writing steps, the manifest, publication

Dependencies point down this list: `sink/` may use the element logic, `sources/` uses nothing
of `sink/`, and nothing here uses `pipelines/`, `trainer/` or `deploy/`.
"""
