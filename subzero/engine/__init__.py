"""The engine: running workflows on Spark and keeping what they produce.

==========================  ==============================================================
module                      holds
==========================  ==============================================================
``engine.layout``           the home directory's layout: one function per path
``engine.arrays``           the zarr array store (no overwrite)
``engine.chunkstore``       chunk stores (local files) and chunks read and written directly
``engine.codec``            the chunk codec: Blosc frames and checksums, bytes in, bytes out
``engine.direct``           chunk files written past the page cache (``O_DIRECT``)
``engine.catalog``          the SQLite catalog: runs, arrays, shards, statistics, query log
``engine.spark``            one quiet Spark session per process
``engine.daemon``           Spark's Python worker daemon, importing the installed pyspark
``engine.inputs``           reading and checking a run's inputs
``engine.tasks``            what a Spark task does: one operator, one output chunk
``engine.runner``           :func:`run_workflow`, the driver's side of a run
``engine.runs``             :class:`LoadedRun`: a finished run for queries
``engine.reexec``           :func:`reexecute`: an operator again, in tracing mode
==========================  ==============================================================
"""
