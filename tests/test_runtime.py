import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from subzero.cells import Box, Ragged
from subzero.errors import CellError
from subzero.lineage import MemorySink, PairBatch, expand_pairs, group_by_payload
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
    ctx.lwrite([(9, 9)], None, None)  # buffered: checked when the pairs are read back
    with pytest.raises(CellError, match=r"cell \(9, 9\) is outside"):
        ctx.full_pairs()
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


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from([0, 1, 3, 8, 9, 12, None]))
def test_group_by_payload_groups_like_a_dict(data, width):
    """Output cells grouped by payload, payloads in byte order: as a dict built pair by
    pair, for payloads of one width (up to 8 bytes they are sorted as integers) or of
    several (``None``)."""
    n = data.draw(st.integers(1, 30))
    if width is None:
        kinds = st.sampled_from([b"\x01", b"\x01\x02\x03\x04", b"\x00\x09", b""])
    else:  # few distinct payloads, so that groups hold several pairs
        kinds = st.sampled_from(data.draw(st.lists(
            st.binary(min_size=width, max_size=width), min_size=1, max_size=4)))
    pays = [data.draw(kinds) for _ in range(n)]
    outs = [data.draw(st.lists(st.integers(0, 1000), min_size=1, max_size=3)) for _ in pays]
    pairs = PairBatch(Ragged.from_rows([np.array(o, np.uint64) for o in outs]),
                      payload=Ragged.from_rows([np.frombuffer(p, np.uint8) for p in pays],
                                               dtype=np.uint8))
    want: dict[bytes, list[int]] = {}
    for p, o in zip(pays, outs):
        want.setdefault(p, []).extend(o)
    got = group_by_payload(pairs)
    assert [p for p, _ in got] == sorted(want)
    assert [o.tolist() for _, o in got] == [want[p] for p in sorted(want)]
