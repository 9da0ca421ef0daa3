"""The contract between the ETL and the trainer, written once and imported by both.

`config` (the dataset config's typed dataclasses), `layout` (file names, compressions, defaults,
format versions) and `manifest` (manifest.json as typed dataclasses). This package imports
neither Apache Beam nor TensorFlow: the trainer's image holds it without the ETL.
"""
