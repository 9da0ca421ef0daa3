"""Data validation in the manner of TFX's StatisticsGen, SchemaGen and ExampleValidator, on the
`tensorflow_metadata` protos that TensorFlow Data Validation and Facets read.

  statistics_proto  statistics.json as a `DatasetFeatureStatisticsList` (`statistics.pb`)
  schema            a `Schema` inferred from the config and the statistics (`schema.pbtxt`)
  anomalies         statistics checked against a schema; a run's share of rejected records
  measures          comparisons of statistics

Pure Python, numpy and the protos: no Beam and no TensorFlow here (a test checks it).
"""
