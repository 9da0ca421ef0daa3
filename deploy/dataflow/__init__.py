"""Dataflow: the flex template of the ETL (one image for the launcher and the workers) and
`shardflow submit`, which launches it."""
