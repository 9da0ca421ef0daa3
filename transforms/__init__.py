"""Element logic of the shardflow ETL as plain functions, wrapped by small composite PTransforms.

One module per concern: a source format, the schema, the join, the split, the encoder, the writer.
"""
