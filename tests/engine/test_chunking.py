"""Chunk limits: an explicit chunking may not cut an array into too many chunks, nor into
many tiny ones unless forced (``subzero run --chunks/--max-chunks/--force``)."""

from __future__ import annotations

import pytest

from subzero.chunking import (FEW_CHUNKS, MIN_CHUNK_BYTES, Chunking, check_chunk_sizes,
                              chunk_count)
from subzero.errors import SubZeroError


def test_a_small_array_may_be_cut_into_a_few_small_chunks():
    arrays = {"a": ((40, 30), "float64"), "t": ((1, 1), "float64"), "s": ((), "float64")}
    check_chunk_sizes(Chunking(split=2), arrays)
    check_chunk_sizes(Chunking(split=8), arrays)  # 64 chunks of 40 bytes: still a few
    assert chunk_count((40, 30), Chunking(split=8).chunk_shape((40, 30))) == FEW_CHUNKS


def test_many_chunks_under_the_minimum_are_refused_unless_forced():
    arrays = {"img": ((40, 30), "uint16")}
    with pytest.raises(SubZeroError, match=r"--chunks '10' cuts array 'img' \(40x30 uint16\) "
                                           r"into 100 chunks of 24 B; expected chunks of at "
                                           r"least 64 KiB .* or --force"):
        check_chunk_sizes(Chunking(split=10), arrays, "--chunks '10'")
    check_chunk_sizes(Chunking(split=10), arrays, force=True)


def test_large_chunks_may_be_many():
    side = 512  # chunks of 512 x 512 float64: 2 MiB each, 10,000 of them
    assert side * side * 8 >= MIN_CHUNK_BYTES
    check_chunk_sizes(Chunking(chunks=(side, side)), {"a": ((100 * side, 100 * side), "f8")})


@pytest.mark.parametrize("force", [False, True])
def test_more_chunks_than_the_cap_are_refused_even_forced(force):
    huge = Chunking(split=9999999999999999999999999)
    with pytest.raises(SubZeroError, match=r"into 1,026,513 chunks; expected at most "
                                           r"100,000 chunks an array"):
        check_chunk_sizes(huge, {"image": ((2001, 513), "uint16")}, force=force)
    with pytest.raises(SubZeroError, match="at most 10 chunks"):
        check_chunk_sizes(Chunking(chunks=(1, 513)), {"image": ((2001, 513), "uint16")},
                          max_chunks=10, force=force)
    check_chunk_sizes(huge, {"image": ((20, 5), "uint16")}, max_chunks=100, force=True)
