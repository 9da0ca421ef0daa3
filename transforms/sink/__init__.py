"""Load: the encoded records of a run written as sharded TFRecords, then published.

`framing` (TFRecord framing and the compressed file writer), `shards` (shard sizing and record
order), `spill` (sorted spill files in the staging folder), `write` (the Beam steps that spill,
write shards, rejected records and publish), `manifest` (the `Manifest` of a run), `output`
(what OUTPUT holds and may be replaced) and `publish` (the atomic switch to the new dataset).
"""
