import numpy as np
import pytest

from subzero.cells import Box, Ragged
from subzero.errors import CellError
from subzero.lineage import MemorySink, PairBatch, expand_pairs
from subzero.modes import Mode
from subzero.runtime import ChunkContext, TaskContext


def ctx2(modes=(Mode.FULL,)):
    ch = ChunkContext((0, 0), Box((0, 0), (4, 4)), (Box((0, 0), (4, 4)), Box((0,), (3,))),
                      (4, 4), ((4, 4), (3,)))
    return TaskContext(ch, frozenset(modes), "op")


def test_lwrite_one_pair_in_every_cell_form():
    ctx = ctx2()
    ctx.lwrite(Box((0, 0), (1, 2)), np.array([[3, 3]]), np.array([2], np.uint64))
    ctx.lwrite([(1, 1)], None, (slice(0, 2),))
    b = ctx.full_pairs()
    assert len(b) == 2
    assert expand_pairs(b, 0) == {(0, 15), (1, 15)}
    assert expand_pairs(b, 1) == {(0, 2), (1, 2), (5, 0), (5, 1)}


def test_lwrite_payload_and_errors():
    ctx = ctx2((Mode.PAY,))
    ctx.lwrite([(0, 0), (0, 1)], payload=b"\x03")
    p = ctx.payload_pairs()
    assert p.is_payload and p.out.row(0).tolist() == [0, 1] and p.payload_bytes(0) == b"\x03"
    with pytest.raises(CellError, match="got cells for 1 inputs; the operator has 2"):
        ctx.lwrite([(0, 0)], [(1, 1)])
    with pytest.raises(CellError, match=r"cell \(9, 9\) is outside"):
        ctx.lwrite([(9, 9)], None, None)
    with pytest.raises(CellError, match="not both"):
        ctx.lwrite([(0, 0)], [(1, 1)], payload=b"x")


def test_lwrite_pairs_bulk_forms():
    ctx = ctx2()
    out = np.array([[0, 0], [1, 1], [2, 2]])
    ins0 = np.stack([out, out + 1], axis=1)  # (n, k=2, ndim)
    ctx.lwrite_pairs(out, ins0, Ragged.from_rows([[0], [], [1, 2]]))
    b = ctx.full_pairs()
    assert len(b) == 3
    assert expand_pairs(b, 0) == {(0, 0), (0, 5), (5, 5), (5, 10), (10, 10), (10, 15)}
    assert expand_pairs(b, 1) == {(0, 0), (10, 1), (10, 2)}
    with pytest.raises(CellError, match="2 cell sets for 3 pairs"):
        ctx.lwrite_pairs(out, out, Ragged.from_rows([[0], [1]]))
    pctx = ctx2((Mode.COMP,))
    pctx.lwrite_pairs(out, payloads=[b"a", b"bb", b""])
    pb = pctx.payload_pairs()
    assert [pb.payload_bytes(k) for k in range(3)] == [b"a", b"bb", b""]
    pctx.lwrite_pairs(out[:2], payloads=b"zz")
    assert pctx.payload_pairs().payload_bytes(4) == b"zz"


def test_memory_sink_and_concat():
    ctx = ctx2()
    ctx.lwrite([(0, 0)], [(1, 1)], [2])
    sink = MemorySink()
    sink.write(ctx.full_pairs())
    sink.write(ctx.full_pairs())
    stats = sink.close()
    assert stats["pairs"] == 2 and stats["out_cells"] == 2 and stats["in_cells"] == 4
    assert isinstance(sink.pairs, PairBatch)
