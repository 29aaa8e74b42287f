"""How arrays split into chunks, and so into Spark tasks (one task per output chunk).

A :class:`Chunking` policy gives the chunk shape of every array of a run:

- ``split=n`` (or one count per axis): every array is cut into ``n`` chunks per axis
  (``split=1`` is one task per operator; tests use 1, 2 and 7 to check halos);
- ``chunks=(r, c)``: that chunk shape for every array of that rank (clipped to the array);
- by default, whole rows cut into ``tasks`` chunks (the Spark session's default
  parallelism, so one wave of tasks keeps every core busy; fewer when the workflow has
  independent parts, such as a visit's CCDs, that keep the cores busy together: see
  :func:`subzero.engine.runner.default_tasks`), more when a chunk would exceed
  ``max_cells``. PySpark costs tens of milliseconds per task, so fewer, larger tasks win
  for a run; queries re-execute finer boxes of their own (see
  :func:`subzero.engine.reexec.reexecute`).

An operator whose parallelization is *global* runs as one task that writes every chunk.

An explicit chunking is checked against the workflow's arrays before a run starts
(:func:`check_chunk_sizes`): no array in more than :data:`DEFAULT_MAX_CHUNKS` chunks, nor
in many chunks under :data:`MIN_CHUNK_BYTES`.

>>> Chunking(split=2).chunk_shape((5, 4))
(3, 2)
>>> Chunking(tasks=2).chunk_shape((2001, 513))
(1001, 513)
>>> [str(b) for _, b in chunk_grid((5, 4), (3, 2))]
['0:3,0:2', '0:3,2:4', '3:5,0:2', '3:5,2:4']
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from subzero.cells import Box
from subzero.errors import SubZeroError
from subzero.sizes import human_bytes

DEFAULT_MAX_CELLS = 1 << 22
#: the most chunks an explicit chunking may cut one array into (``subzero run --max-chunks``)
DEFAULT_MAX_CHUNKS = 100_000
#: the smallest chunk an explicit chunking may make (``subzero run --force`` allows
#: smaller ones) in an array of more than :data:`FEW_CHUNKS` chunks
MIN_CHUNK_BYTES = 64 * 1024
FEW_CHUNKS = 64


@dataclass(frozen=True)
class Chunking:
    """Chunk shape policy for the arrays of a run."""

    split: tuple[int, ...] | None = None
    chunks: tuple[int, ...] | None = None
    tasks: int = 1
    max_cells: int = DEFAULT_MAX_CELLS

    def __post_init__(self) -> None:
        if self.split is not None:
            sp = (self.split,) if isinstance(self.split, int) else tuple(self.split)
            if not sp or any(int(s) < 1 for s in sp):
                raise SubZeroError(f"split must be positive chunk counts. Got {self.split}.")
            object.__setattr__(self, "split", tuple(int(s) for s in sp))
        if self.chunks is not None:
            ch = tuple(int(c) for c in self.chunks)
            if any(c < 1 for c in ch):
                raise SubZeroError(f"chunk sizes must be positive. Got {self.chunks}.")
            object.__setattr__(self, "chunks", ch)
        if self.split is not None and self.chunks is not None:
            raise SubZeroError("give either split (chunks per axis) or chunks (a shape), not both")

    @classmethod
    def parse(cls, text: str | None) -> "Chunking":
        """CLI form: ``"4"`` or ``"4x2"`` = chunks per axis, ``"500,513"`` = chunk shape."""
        if not text:
            return cls()
        try:
            if "," in text:
                return cls(chunks=tuple(int(v) for v in text.split(",")))
            return cls(split=tuple(int(v) for v in text.lower().split("x")))
        except ValueError:
            raise SubZeroError(
                f"bad chunking {text!r}; expected chunks per axis like '4' or '4x2', "
                "or a chunk shape like '500,513'"
            ) from None

    @property
    def is_default(self) -> bool:
        return self.split is None and self.chunks is None

    def with_tasks(self, tasks: int) -> "Chunking":
        return Chunking(self.split, self.chunks, max(1, int(tasks)), self.max_cells)

    def chunk_shape(self, shape: Sequence[int], global_: bool = False) -> tuple[int, ...]:
        """Chunk shape of an array (``global_=True``: the whole array, one chunk)."""
        shape = tuple(int(s) for s in shape)
        if not shape:
            return ()
        if global_:
            return tuple(max(1, s) for s in shape)
        if self.split is not None:
            sp = self.split * len(shape) if len(self.split) == 1 else self.split
            if len(sp) != len(shape):
                raise SubZeroError(f"split {self.split} does not fit an array of shape {shape}")
            return tuple(max(1, math.ceil(s / n)) for s, n in zip(shape, sp))
        if self.chunks is not None and len(self.chunks) == len(shape):
            return tuple(max(1, min(c, s)) for c, s in zip(self.chunks, shape))
        # default: whole rows (contiguous reads), `tasks` chunks, none above max_cells
        cells = math.prod(shape)
        n = max(self.tasks, math.ceil(cells / self.max_cells) if cells else 1)
        n = max(1, min(n, shape[0]))
        rows = max(1, math.ceil(shape[0] / n)) if shape[0] else 1
        return (rows, *[max(1, s) for s in shape[1:]])

    def to_json(self) -> dict[str, Any]:
        return {"split": self.split, "chunks": self.chunks, "tasks": self.tasks,
                "max_cells": self.max_cells}

    @classmethod
    def from_json(cls, doc: dict[str, Any] | None) -> "Chunking":
        doc = doc or {}
        return cls(split=doc.get("split"), chunks=doc.get("chunks"), tasks=doc.get("tasks", 1),
                   max_cells=doc.get("max_cells", DEFAULT_MAX_CELLS))


def chunk_grid(shape: Sequence[int], chunk: Sequence[int]) -> list[tuple[tuple[int, ...], Box]]:
    """Every chunk of an array as ``(grid index, global box)``, C order."""
    shape = tuple(shape)
    if not shape:
        return [((), Box((), ()))]
    counts = [max(1, math.ceil(s / c)) for s, c in zip(shape, chunk)]
    out = []
    for idx in itertools.product(*[range(n) for n in counts]):
        lo = tuple(i * c for i, c in zip(idx, chunk))
        hi = tuple(min(s, l + c) for s, l, c in zip(shape, lo, chunk))
        out.append((tuple(idx), Box(lo, hi)))
    return out


def chunk_count(shape: Sequence[int], chunk: Sequence[int]) -> int:
    """How many chunks of shape ``chunk`` cover an array of ``shape`` (1 for rank 0).

    >>> chunk_count((5, 4), (3, 2)), chunk_count((), ())
    (4, 1)
    """
    return math.prod(max(1, math.ceil(s / c)) for s, c in zip(shape, chunk))


def check_chunk_sizes(chunking: Chunking, arrays: Mapping[str, tuple[Sequence[int], Any]],
                      spec: str = "the chunking", max_chunks: int = DEFAULT_MAX_CHUNKS,
                      force: bool = False) -> None:
    """Refuse a chunking that would cut an array of ``arrays`` (name: ``(shape, dtype)``)
    into more than ``max_chunks`` chunks, or, unless ``force``, into chunks smaller than
    :data:`MIN_CHUNK_BYTES` where the array gets more than :data:`FEW_CHUNKS` of them.

    Every chunk is a file and a task: a chunking far finer than the data makes a run
    spend its time and its home's inodes on them. A small array may still be cut into a
    few small chunks (tests and demos do). ``spec`` names the chunking in the message.

    >>> check_chunk_sizes(Chunking(split=2), {"a": ((40, 30), "float64")})
    >>> check_chunk_sizes(Chunking(split=1000), {"a": ((1000, 1000), "uint8")},
    ...                   "--chunks 1000")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    subzero.errors.SubZeroError: --chunks 1000 cuts array 'a' (1000x1000 uint8) into ...
    """
    if max_chunks < 1:
        raise SubZeroError(f"the most chunks an array may have must be positive. "
                           f"Got {max_chunks}.")
    for name, (shape, dtype) in arrays.items():
        shape = tuple(int(s) for s in shape)
        if not shape:
            continue
        chunk = chunking.chunk_shape(shape)
        n = chunk_count(shape, chunk)
        what = f"{spec} cuts array {name!r} ({'x'.join(map(str, shape))} {np.dtype(dtype)})"
        if n > max_chunks:
            raise SubZeroError(f"{what} into {n:,} chunks; expected at most {max_chunks:,} "
                               "chunks an array (a coarser chunking, or a higher --max-chunks)")
        size = math.prod(chunk) * max(1, np.dtype(dtype).itemsize)
        if not force and n > FEW_CHUNKS and size < MIN_CHUNK_BYTES:
            raise SubZeroError(
                f"{what} into {n:,} chunks of {human_bytes(size)}; expected chunks of at "
                f"least {MIN_CHUNK_BYTES // 1024} KiB in an array of more than {FEW_CHUNKS} "
                "chunks (a coarser chunking, or --force to allow small chunks)")


def chunk_of(cell_box: Box, chunk: Sequence[int]) -> tuple[int, ...]:
    return tuple(l // c for l, c in zip(cell_box.lo, chunk))


def chunk_key(index: Sequence[int]) -> str:
    """A chunk index as a directory / catalog key: ``"0.3"`` (``"0"`` for rank 0)."""
    return ".".join(str(i) for i in index) if len(index) else "0"


def task_grid(op: Any, out_chunks: Sequence[int]) -> list[tuple[tuple[int, ...], Box]]:
    """The output boxes of a bound operator's tasks: one per stored chunk, or one for the
    whole array when the operator is global (that task writes every chunk)."""
    if op.parallelism.kind == "global":
        return [((0,) * len(op.out_shape), Box.full(op.out_shape))]
    return chunk_grid(op.out_shape, out_chunks)
