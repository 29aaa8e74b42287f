"""The conformance suite every encoding passes (written once, subclassed per strategy).

Region pairs drawn by Hypothesis are written through the real sink (several ``write``
calls, then ``close``), the published shard is reopened with :func:`encoders.lookup.open_shard`
and every lookup is compared with a brute-force reading of the same pairs.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from unittest import mock

import lmdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from encoders import store
from encoders.layouts import fewcells
from encoders.layouts.keyspace import coords
from encoders.lookup import LookupTimeout, open_shard
from encoders.registry import encoding_class
from encoders.sink import make_sink
from subzero.cells import Box
from subzero.engine.layout import shard_spec
from subzero.lineage import PairBatch
from subzero.modes import Strategy
from subzero.testing import brute_backward, brute_forward
from tests.encoders.strategies import queries, region_pairs, shapes, split_batch

SETTINGS = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.differing_executors])


def write_shard(home, strategy: str, pairs: PairBatch | None, out_shape, in_shapes,
                parts: int = 1, attempt: int = 0, chunk=(0,)) -> dict:
    spec = shard_spec(home, "r1", "op", Strategy.parse(strategy), chunk,
                     Box.full(out_shape), tuple(out_shape), tuple(in_shapes), attempt)
    sink = make_sink(spec)
    if pairs is not None:
        for b in split_batch(pairs, parts):
            sink.write(b)
    return sink.close()


def to_format1(path) -> None:
    """Rewrite the published shard at ``path`` in the layout of format 1, as SubZero wrote
    shards before format 2 (what users' stored runs hold): the same tables, written the same
    way, then the blobs in a named database ``blobs`` of their own (in the main database
    from format 2), ``meta.json`` with ``format`` 1 and the ``blobs`` database's
    statistics under ``lmdb``. Its ``data.mdb`` is byte for byte the one format 1's writer
    made of the same pairs, but for the map size its meta pages record."""
    path = Path(path)
    meta = json.loads((path / store.META).read_text())
    meta["format"] = 1
    meta.pop("lmdb_main", None)
    if (path / store.DATA).exists():
        kinds = meta["tables"]
        src = lmdb.open(str(path), readonly=True, lock=False, max_dbs=max(1, len(kinds)))
        with src.begin() as txn:
            tables = {}
            for name, kind in kinds.items():
                dup = kind == "dupfixed"
                db = src.open_db(name.encode(), txn=txn, create=False, dupsort=dup,
                                 dupfixed=dup)
                tables[name] = list(txn.cursor(db).iternext(keys=True, values=True))
            cur = txn.cursor()
            blobs = {}
            if cur.set_range(store.BLOB_KEY):
                for k, v in cur.iternext(keys=True, values=True):
                    if not k.startswith(store.BLOB_KEY):
                        break
                    blobs[k[len(store.BLOB_KEY):]] = v
        src.close()
        (path / store.DATA).unlink()
        env = lmdb.open(str(path), map_size=1 << 26, subdir=True, max_dbs=len(kinds) + 1,
                        lock=False, sync=False, metasync=False, readahead=False)
        stats = {}
        with env.begin(write=True) as txn:  # format 1's writer: tables, then blobs
            for name, kind in kinds.items():
                dup = kind == "dupfixed"
                db = env.open_db(name.encode(), txn=txn, dupsort=dup, dupfixed=dup)
                txn.cursor(db).putmulti(tables[name], append=True)
                stats[name] = txn.stat(db)
            if blobs:
                db = env.open_db(store.BLOBS.encode(), txn=txn)
                for name in sorted(blobs):
                    txn.put(name, blobs[name], db=db, append=True)
                stats[store.BLOBS] = txn.stat(db)
        env.close()
        meta["lmdb"] = stats
        meta["stats"]["data_bytes"] = (path / store.DATA).stat().st_size
    meta["files"] = {f.name: f.stat().st_size for f in path.iterdir() if f.name != store.META}
    (path / store.META).write_text(json.dumps(meta))


def brute_payload(pairs: PairBatch, q: np.ndarray | None) -> dict[int, set[bytes]]:
    """``{output cell: payloads}`` of the pairs, restricted to ``q``."""
    want = None if q is None else set(q.tolist())
    res: dict[int, set[bytes]] = {}
    for k in range(len(pairs)):
        for c in pairs.out.row(k).tolist():
            if want is None or c in want:
                res.setdefault(int(c), set()).add(pairs.payload_bytes(k))
    return res


def read_payload(b: PairBatch | None) -> dict[int, set[bytes]]:
    res: dict[int, set[bytes]] = {}
    if b is not None:
        for k in range(len(b)):
            for c in b.out.row(k).tolist():
                res.setdefault(int(c), set()).add(b.payload_bytes(k))
    return res


def check_full_lookups(reader, pairs, q, in_shapes, data) -> None:
    """Backward from output cells ``q`` and forward from drawn input cells, per input, agree
    with the brute-force model of ``pairs`` (sorted distinct uint64 answers)."""
    out_shape = reader.out_shape
    for i, s in enumerate(in_shapes):
        qi = data.draw(queries(tuple(s)))
        want_b, want_f = brute_backward(pairs, q, i), brute_forward(pairs, qi, i)
        # every lookup path: plain Python for a few cells, vectorized, and the fallback
        # from the first to the second when an answer outgrows it
        for few, most in ((fewcells.FEW_CELLS, fewcells.MAX_CELLS), (-1, 0), (1 << 20, 2)):
            with mock.patch.object(fewcells, "FEW_CELLS", few), \
                    mock.patch.object(fewcells, "MAX_CELLS", most):
                got = reader.backward(q, i)
                assert got.dtype == np.uint64 and (np.diff(got) > 0).all()
                assert set(got.tolist()) == want_b
                got = reader.forward(qi, i)
                assert got.dtype == np.uint64 and (np.diff(got) > 0).all()
                assert set(got.tolist()) == want_f
                # into a caller's mask: large answers are set there, small ones returned
                for look, qq, size, want in (
                        (reader.backward, q, int(np.prod(s)), want_b),
                        (reader.forward, qi, int(np.prod(out_shape)), want_f)):
                    into = np.zeros(size, dtype=bool)
                    got = look(qq, i, into=into)
                    if got is None:
                        assert set(np.flatnonzero(into).tolist()) == want
                    else:
                        assert not into.any() and set(got.tolist()) == want


class EncodingConformance:
    """Subclass and set ``strategy`` (a strategy name) to run the suite on it."""

    strategy: str = ""

    @property
    def payload(self) -> bool:
        return Strategy.parse(self.strategy).encoding.startswith("Pay")

    @SETTINGS
    @given(data=st.data(), out_shape=shapes, second=st.booleans(), parts=st.integers(1, 3))
    def test_lookups_match_brute_force(self, data, out_shape, second, parts):
        in_shapes = [out_shape] + ([data.draw(shapes)] if second else [])
        pairs = data.draw(region_pairs(out_shape, in_shapes, self.payload))
        home = tempfile.mkdtemp(prefix="sz-conf-")
        try:
            stats = write_shard(home, self.strategy, pairs, out_shape, in_shapes, parts)
            with open_shard(stats["path"]) as r:
                for _ in range(3):
                    q = data.draw(queries(out_shape))
                    if self.payload:
                        assert read_payload(r.payload_pairs(q)) == brute_payload(pairs, q)
                        continue
                    check_full_lookups(r, pairs, q, in_shapes, data)
                if self.payload:
                    assert read_payload(r.payload_pairs(None)) == brute_payload(pairs, None)
        finally:
            shutil.rmtree(home, ignore_errors=True)

    @settings(SETTINGS, max_examples=10)
    @given(data=st.data(), out_shape=shapes, second=st.booleans())
    def test_format1_shard_matches_brute_force(self, data, out_shape, second):
        """The same lookups on the shard rewritten in format 1 (users' stored runs)."""
        in_shapes = [out_shape] + ([data.draw(shapes)] if second else [])
        pairs = data.draw(region_pairs(out_shape, in_shapes, self.payload))
        home = tempfile.mkdtemp(prefix="sz-conf-")
        try:
            stats = write_shard(home, self.strategy, pairs, out_shape, in_shapes)
            to_format1(stats["path"])
            with open_shard(stats["path"]) as r:
                assert r.meta["format"] == 1
                q = data.draw(queries(out_shape))
                if self.payload:
                    assert read_payload(r.payload_pairs(q)) == brute_payload(pairs, q)
                    assert read_payload(r.payload_pairs(None)) == brute_payload(pairs, None)
                else:
                    check_full_lookups(r, pairs, q, in_shapes, data)
        finally:
            shutil.rmtree(home, ignore_errors=True)

    @settings(SETTINGS, max_examples=15)
    @given(data=st.data(), out_shape=shapes, n=st.integers(1, 3))
    def test_records_of_several_shards_decode_together(self, data, out_shape, n):
        """An encoding that splits ``payload_pairs`` into ``payload_records`` (each
        shard's records for the cells, undecoded) and ``pairs_from_records`` (decoding
        several shards' at once, as a query step does): exactly the shards' own
        ``payload_pairs`` one after the other, with or without the cells' coordinates."""
        kind = encoding_class(Strategy.parse(self.strategy).encoding)
        if not hasattr(kind, "pairs_from_records"):
            pytest.skip(f"{kind.__name__} has no payload records to decode together")
        home = tempfile.mkdtemp(prefix="sz-conf-")
        try:
            readers = []
            for k in range(n):
                pairs = data.draw(region_pairs(out_shape, [out_shape], True))
                stats = write_shard(home, self.strategy, pairs, out_shape, [out_shape],
                                    chunk=(k,))
                readers.append(open_shard(stats["path"]))
            q = data.draw(queries(out_shape))
            at = coords(q, out_shape)[:, :len(out_shape)]
            want = PairBatch.concat([r.payload_pairs(q) for r in readers])
            # each shard's records in plain Python (a few cells) or arrays, mixed
            few = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))

            def records(r, few_cells, given_at):
                with mock.patch.object(fewcells, "FEW_CELLS",
                                       len(q) if few_cells else -1):
                    return r.payload_records(q, None, given_at)

            for given_at in (None, at):
                got = kind.pairs_from_records([records(r, f, given_at)
                                               for r, f in zip(readers, few)])
                assert (got is None) == (want is None)
                if want is not None:
                    assert got.out.values.tolist() == want.out.values.tolist()
                    assert got.out.offsets.tolist() == want.out.offsets.tolist()
                    assert got.payload.values.tolist() == want.payload.values.tolist()
                    assert got.payload.offsets.tolist() == want.payload.offsets.tolist()
            for r in readers:
                r.close()
        finally:
            shutil.rmtree(home, ignore_errors=True)

    def test_statistics_describe_the_pairs(self, tmp_path):
        out_shape, in_shapes = (4, 5), [(4, 5)]
        if self.payload:
            pairs = PairBatch(_rag([[0, 1], [7]]), payload=_rag([[3], [3]], np.uint8))
        else:
            pairs = PairBatch(_rag([[0, 1], [7]]), ins=(_rag([[0, 1, 2], [6]]),))
        st_ = write_shard(tmp_path, self.strategy, pairs, out_shape, in_shapes)
        assert st_["pairs"] == 2 and st_["out_cells"] == 3 and st_["fanout"] == 1.5
        assert st_["fanin"] == (0.0 if self.payload else (2 * 3 + 1) / 3)
        assert st_["attempt"] == 0 and st_["data_bytes"] > 0 and st_["encode_s"] >= 0
        many = "many" in self.strategy
        assert (st_["index_bytes"] > 0) == many
        assert st_["path"].endswith(f"/runs/r1/lineage/op/{self.strategy}/0")

    def test_empty_shard_answers_nothing(self, tmp_path):
        st_ = write_shard(tmp_path, self.strategy, None, (3, 3), [(3, 3)])
        q = np.arange(9, dtype=np.uint64)
        with open_shard(st_["path"]) as r:
            assert r.strategy == Strategy.parse(self.strategy)
            assert r.out_box == Box((0, 0), (3, 3)) and r.in_shapes == ((3, 3),)
            if self.payload:
                assert r.payload_pairs(q) is None and r.payload_pairs(None) is None
            else:
                assert len(r.backward(q, 0)) == 0 and len(r.forward(q, 0)) == 0

    def test_passed_deadline_raises_lookup_timeout(self, tmp_path):
        pairs = (PairBatch(_rag([[0]]), payload=_rag([[1]], np.uint8)) if self.payload
                 else PairBatch(_rag([[0]]), ins=(_rag([[0]]),)))
        st_ = write_shard(tmp_path, self.strategy, pairs, (2,), [(2,)])
        with open_shard(st_["path"]) as r:
            past = time.perf_counter() - 1.0
            with pytest.raises(LookupTimeout):
                if self.payload:
                    r.payload_pairs(np.array([0], np.uint64), past)
                else:
                    r.backward(np.array([0], np.uint64), 0, past)


def _rag(rows, dtype=np.uint64):
    from subzero.cells import Ragged

    return Ragged.from_rows([np.asarray(r, dtype=dtype) for r in rows], dtype)
