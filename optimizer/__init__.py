"""The strategy optimizer (paper VII): statistics, cost model, workload, ILP and plans.

========================  ===============================================================
module                    holds
========================  ===============================================================
``optimizer.stats``       per-operator statistics; the sampling pass (nothing stored)
``optimizer.calibration`` calibrated constants (the encoders' size model's coefficients,
                          the query executor's cost constants)
``optimizer.calibrate``   ``subzero calibrate``: measuring them on this machine
``optimizer.costs``       disk, runtime overhead and query cost per strategy
``optimizer.workload``    query log / sample queries -> traversal probabilities
``optimizer.ilp``         the ILP on PuLP + CBC
``optimizer.plan``        the pipeline: :func:`~optimizer.plan.optimize`,
                          :func:`~optimizer.plan.plan_from_catalog`
========================  ===============================================================

Query costs and the re-execution tile rule are the query executor's
(:mod:`subzero.query.costs`, :mod:`subzero.query.reexec`): the optimizer plans with the
numbers the executor acts on. The commands are in :mod:`subzero.cli.optimize`.

>>> from optimizer.plan import optimize    # doctest: +SKIP
"""
