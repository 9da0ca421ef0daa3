"""The ETL's tuning defaults: how a run cuts its work, never what it makes.

Kept in a module that imports nothing, so that the command line (`pipelines.flags`) can state
them in its help without importing Beam; the steps that use them import them from here.
"""

ENCODE_THREADS = 2  # helper threads of an Encoder (0: where worker processes fill the cores)
# encoded bytes a worker gathers before it sorts and spills them (`shardflow etl --spill-mb`)
SPILL_BYTES = 32 << 20
# bytes of counted facts (vocabularies, rows) a worker holds before it spills them
FACTS_SPILL_BYTES = 8 << 20
# pieces a worker process writes at once (fewer where several share a machine's cores)
WRITE_THREADS = 4
SPLIT_BYTES = 64 << 20  # the largest range size chosen for the workers (`split_size`)
MIN_SPLIT_BYTES = 4 << 20  # the smallest
RANGES_PER_WORKER = 8  # enough that the ranges spread evenly, also where workers get a fixed share
