"""A global reduction computed from its input's chunks, with the bits of one numpy call.

A global mean (the astronomy ``bgmean``) otherwise runs as one task that reads its whole
input: at 64x, 525 MB decoded into one process before a single addition. Here each task
that makes a chunk of the input reduces the chunk it holds in memory to a few numbers (a
*partial*), and the driver combines the partials. For ``min``, ``max``, ``any``, ``all`` and
integer sums the order does not matter. A float sum (and so a mean) depends on the order
of its additions: numpy adds a contiguous run of ``n`` values *pairwise* (runs of at most
:data:`BLOCK` values with eight accumulators; longer runs split in two, the first half a
multiple of 8), so the sum is a fixed tree over ``0..n-1``. A chunk of whole rows of a
C-order array is a contiguous range of that run: its partial is the sum of every tree node
that lies inside the range (:func:`cover`; a few dozen), plus its own values of the two
leaves that cross the range's ends. :func:`combine_sums` rebuilds the root from them: the
same additions in the same order as ``np.sum`` of the whole array, so the same bits (the
tests compare on random shapes and chunkings).

>>> x = np.random.default_rng(0).standard_normal((1001, 37))
>>> rows = [(0, 300), (300, 1001)]
>>> parts = [sum_partial(x[a:b].reshape(-1), a * 37, x.size) for a, b in rows]
>>> bool(combine_sums(parts, x.size) == np.sum(x))
True
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

#: numpy's pairwise summation sums runs of at most this many values directly (its
#: ``PW_BLOCKSIZE``), longer ones as two halves
BLOCK = 128

Node = tuple[int, int]  # (first index, length) of a node of the summation tree


def _half(n: int) -> int:
    """Where numpy splits a run of ``n`` values: half, rounded down to a multiple of 8."""
    h = n // 2
    return h - h % 8


def cover(lo: int, hi: int, n: int) -> tuple[list[Node], list[Node]]:
    """In numpy's summation tree over ``n`` values: the largest nodes inside ``lo..hi-1``,
    in order, and the leaves that hold values both inside and outside it.

    >>> cover(0, 1000, 1000)
    ([(0, 1000)], [])
    >>> cover(0, 500, 1000)
    ([(0, 496)], [(496, 120)])
    """
    inside: list[Node] = []
    crossing: list[Node] = []
    todo = [(0, n)]
    while todo:
        s, m = todo.pop()
        if s >= hi or s + m <= lo or m == 0:
            continue
        if lo <= s and s + m <= hi:
            inside.append((s, m))
        elif m <= BLOCK:
            crossing.append((s, m))
        else:
            h = _half(m)
            todo.append((s + h, m - h))
            todo.append((s, h))
    return inside, crossing


class SumPartial:
    """A contiguous range's part of a pairwise sum: node sums and leaf pieces."""

    __slots__ = ("sums", "pieces")

    def __init__(self, sums: dict[Node, np.generic],
                 pieces: dict[Node, tuple[int, np.ndarray]]) -> None:
        self.sums = sums  # node -> its sum (numpy's own for those values)
        self.pieces = pieces  # crossing leaf -> (offset in the leaf, the values there)

    def __reduce__(self) -> tuple:  # plain data to pickle (the task's result)
        return (SumPartial, (self.sums, self.pieces))


def sum_partial(values: np.ndarray, lo: int, n: int) -> SumPartial:
    """The part of the pairwise sum of ``n`` values that ``values`` (1-d, the values at
    ``lo, lo+1, ...``) holds."""
    hi = lo + len(values)
    inside, crossing = cover(lo, hi, n)
    sums = {(s, m): np.add.reduce(values[s - lo:s - lo + m]) for s, m in inside}
    pieces = {}
    for s, m in crossing:
        a, b = max(s, lo), min(s + m, hi)
        pieces[(s, m)] = (a - s, values[a - lo:b - lo].copy())
    return SumPartial(sums, pieces)


def combine_sums(parts: Sequence[SumPartial], n: int) -> np.generic:
    """``np.sum`` of the ``n`` values whose ranges ``parts`` cover (each value once)."""
    known: dict[Node, np.generic] = {}
    leaves: dict[Node, list[tuple[int, np.ndarray]]] = {}
    dtype = None
    for p in parts:
        known.update(p.sums)
        for node, piece in p.pieces.items():
            leaves.setdefault(node, []).append(piece)
            dtype = piece[1].dtype
        if p.sums and dtype is None:
            dtype = next(iter(p.sums.values())).dtype
    for (s, m), got in leaves.items():
        leaf = np.empty(m, dtype=got[0][1].dtype)
        seen = np.zeros(m, dtype=bool)
        for off, vals in got:
            leaf[off:off + len(vals)] = vals
            seen[off:off + len(vals)] = True
        if not seen.all():
            raise ValueError(f"the values {s}..{s + m - 1} are not all in the parts")
        known[(s, m)] = np.add.reduce(leaf)

    def value(s: int, m: int) -> np.generic:
        got = known.get((s, m))
        if got is not None:
            return got
        if m <= BLOCK:
            raise ValueError(f"the values {s}..{s + m - 1} are not all in the parts")
        h = _half(m)
        return value(s, h) + value(s + h, m - h)

    if n == 0 or dtype is None:
        raise ValueError("no values to sum")
    # numpy starts a sum from its identity: 0 + the tree (a -0.0 tree sums to 0.0)
    return np.dtype(dtype).type(0) + value(0, n)
