"""Load: the encoded records of a run written as sharded TFRecords, then published.

write      the Beam steps: spill encoded records, then write each shard (`WriteShards`)
spill      sorted spill files in the staging folder, read back a piece of a shard at a time
framing    TFRecord framing and the compressed record file writer
segments   shards joined from their pieces, compressed apart as segments of one stream
finalize   the last step: rejected records, statistics, manifest, checks, publication
manifest   the run's `Manifest`, from what was written and counted
output     what OUTPUT holds and what a run may replace there
publish    the atomic switch from the staging folder to OUTPUT
storage    files and objects (local or gs://): created whole, abandoned, listed, deleted
"""
