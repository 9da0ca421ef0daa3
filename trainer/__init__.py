"""The shardflow trainer: reads a dataset written by the ETL (its manifest.json and TFRecord
shards), builds a tf.data input pipeline and a tf_keras model from the manifest's features,
trains it on a tf.distribute strategy, and exports a SavedModel that serves raw tf.train.Example.
It never imports Apache Beam. Entry points: `python -m trainer.task` (`shardflow train`) and
`trainer.inspect.main` (`shardflow inspect`).
"""
