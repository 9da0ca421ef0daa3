"""Entry points and wiring of the shardflow ETL: config loading, `run(argv)`, `build_etl(p, cfg)`.

Element logic lives in `transforms/`; nothing here touches a record.
"""
