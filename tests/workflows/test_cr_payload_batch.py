"""The cosmic-ray payloads decoded all at once (``map_p_rows``, ``map_p_rows_hits``) name
exactly what decoding them one distinct payload at a time does (``map_p``,
``map_p_hits``), for cell masks, paths with stays, empty masks and image borders; and a
query through stored lineage answers the same either way."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import subzero
from subzero.cells import as_linear
from subzero.testing import bind
from workflows.astro_data import SKY
from workflows.astro_udfs import TAG_CELLS, CosmicRayDetect
from workflows.checkable import default_inputs

SHAPE = (23, 17)


def _row(kind: int, radius: int, steps: list[int], mask: int) -> bytes:
    if kind == 0:
        return bytes([TAG_CELLS]) + int(mask).to_bytes(4, "little")
    return bytes([radius, *steps])


payload = st.builds(_row, st.integers(0, 1), st.integers(0, 6),
                    st.lists(st.integers(0, 8), min_size=4, max_size=4),
                    st.integers(0, (1 << 25) - 1))


# cells at least 4 from the border: a payload's steps (at most 4) stay in the image, as the
# writer's do (they lead to neighbours that are candidates); boxes still clip at the border
@given(st.lists(st.tuples(st.integers(4, SHAPE[0] - 5), st.integers(4, SHAPE[1] - 5),
                          payload), min_size=1, max_size=40),
       st.integers(0, 2 ** 32 - 1))
@settings(max_examples=300, deadline=None)
def test_batch_decoding_names_what_one_payload_at_a_time_does(items, seed):
    op = bind(CosmicRayDetect(), np.zeros(SHAPE))
    cells = np.array([(r, c) for r, c, _ in items], dtype=np.int64)
    rows = np.frombuffer(b"".join(p for _, _, p in items), dtype=np.uint8).reshape(-1, 5)
    one = [as_linear(op.map_p(cells[k:k + 1], rows[k].tobytes(), 0), SHAPE)
           for k in range(len(items))]
    expected = np.unique(np.concatenate(one)) if one else np.empty(0, np.uint64)
    got = op.map_p_rows(cells, rows, 0)  # the union, in any order, repeats allowed
    np.testing.assert_array_equal(np.unique(np.asarray(got, dtype=np.uint64)),
                                  expected.astype(np.uint64))
    frontier = np.random.default_rng(seed).random(SHAPE) < 0.02
    hits = op.map_p_rows_hits(cells, rows, 0, frontier)
    each = [bool(op.map_p_hits(cells[k:k + 1], rows[k].tobytes(), 0, frontier)[0])
            for k in range(len(items))]
    np.testing.assert_array_equal(hits, each)


def test_other_widths_have_no_batch_form():
    op = bind(CosmicRayDetect(), np.zeros(SHAPE))
    cells = np.array([[3, 3]])
    assert op.map_p_rows(cells, np.array([[2]], np.uint8), 0) is None  # an older 1-byte radius
    assert op.map_p_rows_hits(cells, np.array([[2]], np.uint8), 0, np.ones(SHAPE, bool)) is None


def test_a_garbled_path_payload_is_named():
    op = bind(CosmicRayDetect(), np.zeros(SHAPE))
    with pytest.raises(Exception, match="cosmic-ray path payload"):
        op.map_p_rows(np.array([[3, 3]]), np.array([[2, 9, 4, 4, 4]], np.uint8), 0)


class RowsForgetTheSteps(CosmicRayDetect):
    """Decodes one payload at a time right, but the batch forms (what queries use) name
    only the cell itself."""

    def map_p_rows(self, outcells, payloads, i):
        return as_linear(outcells, self.in_shapes[i])

    def map_p_rows_hits(self, outcells, payloads, i, frontier_in):
        return frontier_in.reshape(-1)[as_linear(outcells, self.in_shapes[i])]


def test_the_checker_reads_payloads_with_the_batch_form_queries_use():
    """A bug in ``map_p_rows`` alone makes queries wrong, so check-lineage must see it:
    the checker decodes payloads as queries do (:func:`subzero.lineage.payload_lineage`)."""
    rmbg, = default_inputs("CosmicRayDetect")
    good = subzero.check_lineage(CosmicRayDetect(sky=SKY), inputs=[rmbg], samples=8,
                                 modes=["COMP"])
    bad = subzero.check_lineage(RowsForgetTheSteps(sky=SKY), inputs=[rmbg], samples=8,
                                modes=["COMP"])
    assert good.sound and good.mode("COMP").declared > bad.mode("COMP").declared
    assert not bad.sound


@given(st.lists(st.tuples(st.integers(-8, SHAPE[0] + 7), st.integers(-8, SHAPE[1] + 7)),
                max_size=30), st.integers(0, 6))
@settings(max_examples=200, deadline=None)
def test_box_union_is_every_box_painted(centres, radius):
    """The union of a path's boxes, drawn an axis at a time: every box painted on a mask,
    centres inside, on and beyond the border."""
    from workflows.astro_payloads import _box_union

    at = np.array(centres, dtype=np.int64).reshape(-1, 2)
    mask = np.zeros(SHAPE, dtype=bool)
    for y, x in centres:
        mask[max(0, y - radius):max(0, y + radius + 1),
             max(0, x - radius):max(0, x + radius + 1)] = True
    assert _box_union(at, radius, SHAPE).tolist() == np.flatnonzero(mask).tolist()
