"""What-if replay: a finished run again with some cells of one array changed, recomputing
only what the change reaches, written as a new run derived from the original.

:func:`replay_run` changes chosen cells of one array of a complete run (an input or an
intermediate), then walks the operators downstream in run order. For each one whose inputs
changed it asks the run's own forward lineage (:meth:`subzero.query.QueryExecutor.reach`)
which output cells the changed cells reach, recomputes only the tiles holding those cells
with the run's tasks (:func:`subzero.engine.tasks.run_task`, capturing lineage with the
operator's strategies), and compares the recomputed cells with the original: only the
cells whose value really changed go on to the next operator. (An intermediate recomputed
whole, by an operator that is not global, whose values are noisy is not compared unless
asked: its cells all go on.) Sound lineage makes the result equal, bit for bit, to a full
run on the changed data: a cell outside the forward lineage of every changed cell cannot
change.

The derived run is copy on write (:mod:`subzero.engine.cowstore`): unchanged arrays link
to the parent's, changed ones share the parent's chunk files until a chunk is rewritten,
and its lineage holds the shards of recomputed chunks only. Its catalog rows
(``runs.parent``, ``runs.derivation``) reference the parent's shards for every chunk it did
not recompute.

==========================  ==============================================================
module                      holds
==========================  ==============================================================
``replay.runner``           :func:`replay_run`: the steps, and the tiles recomputed
``replay.plan``             checks, and what a change can reach from the workflow alone
``replay.tiles``            the tiles to recompute, and the changed cells of a comparison
``replay.shards``           recomputed lineage shards, shared with the parent's when equal
``replay.values``           :func:`replay_values`: the new values, checked
``replay.result``           :class:`ReplayResult`, :class:`ArrayReplay`
==========================  ==============================================================

>>> res = replay_run(load_run(home, "latest"), "image", mask, values)   # doctest: +SKIP
>>> res.array_result("bright").changed                                  # doctest: +SKIP
"""

from subzero.engine.cowstore import differs
from subzero.replay.plan import check_replay, check_status
from subzero.replay.result import ArrayReplay, ReplayResult
from subzero.replay.runner import replay_run
from subzero.replay.values import replay_values

__all__ = ["replay_run", "ReplayResult", "ArrayReplay", "replay_values", "check_replay",
           "check_status", "differs"]
