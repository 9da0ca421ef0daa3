"""Extract: every source format read into chunks of raw records, rejected records and counts.

`registry` finds a format's module by name; `read.ReadSource` reads any configured source;
`ranges` plans byte ranges of large files so that several workers share one file; one module
per format (`csv`, `jsonl`, `parquet`, `avro`, `tfrecord`, `text`, `binary`, `images`, `sql`,
`bigquery`).
"""
