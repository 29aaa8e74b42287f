"""The benchmark's cleaners (``benchmarks/udf_cases.py``) declare one lineage, however
they write it: pairs by hand, boxes by hand, the decorators."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from subzero.modes import Mode
from subzero.testing import bind, run_chunked

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import udf_cases  # noqa: E402


def _sets(pairs) -> dict[int, tuple[frozenset, ...]]:
    out: dict[int, list[set]] = {}
    for k, o in enumerate(pairs.out.rows()):
        for c in o.tolist():
            got = out.setdefault(c, [set() for _ in pairs.ins])
            for s, r in zip(got, pairs.ins):
                s.update(r.row(k).tolist())
    return {c: tuple(frozenset(s) for s in v) for c, v in out.items()}


@pytest.mark.parametrize("make", [udf_cases.FullCleaner, udf_cases.BoxCleaner,
                                  udf_cases.api_cleaner])
def test_every_cleaner_declares_its_flagged_boxes_and_the_identity(make):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(23, 17)).astype(np.float32)
    m = rng.random((23, 17)) < 0.05
    out, full, _ = run_chunked(bind(make(), x, m), [x, m], split=2, modes=[Mode.FULL])
    assert np.array_equal(out, udf_cases._clean(x, m))
    got = _sets(full)
    h, w = x.shape
    for c in range(h * w):
        i, j = divmod(c, w)
        if m[i, j]:
            box = frozenset(r * w + k for r in range(max(0, i - 2), min(h, i + 3))
                            for k in range(max(0, j - 2), min(w, j + 3)))
            assert got[c] == (box, box)
        else:
            assert got[c] == (frozenset({c}), frozenset({c}))
