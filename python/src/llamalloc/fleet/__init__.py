"""A fleet's profiles aggregated into a training corpus (docs/fleet.md).

    llamalloc aggregate PROFILES... -o CORPUS [--engine duckdb|spark]

`inputs` expands the command's arguments into files, `parse` turns one profile into rows (in the engine's worker
processes), `corpus` is the corpus on disk (its manifest, its Parquet parts, reading it back for training), and
`duckdb_engine` and `spark_engine` are the two engines that run the same aggregation.
"""
