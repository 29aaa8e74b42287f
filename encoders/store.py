"""The shard store: LMDB environments and on-disk R-trees, written once, published atomically.

A shard is one directory (``spec.path``, laid out by :func:`subzero.engine.layout.shard_dir`)::

    data.mdb             LMDB environment: a named database per table, blobs in the main one
    rtree_<name>.dat/.idx  R-trees of the *Many encodings (libspatialindex, bulk-loaded)
    meta.json            metadata (strategy, shapes, key boxes, statistics); written last

Blobs are entries of the main database, keyed ``blob:<name>`` beside the tables' records
(format 2): the main database's one page holds a small blob as it is, and a large one's
node pointing to its overflow pages. Format 1 shards keep their blobs in a named database
of their own (``blobs``), whose page costs each shard 4 KiB more (a small shard's file is
5 to 20 pages); readers take both layouts.

Writing (:class:`ShardWriter`):

- the shard is built in a temporary sibling directory
  ``.tmp.<chunk>.<attempt>.<host>.<pid>.<uuid>``, every table in ONE LMDB write
  transaction with sorted keys in append mode (no page splits: pages fill up), R-trees
  bulk-loaded (STR) with nodes sized to fill a 4 KiB page;
- the LMDB map starts at an estimate from the encoded sizes and doubles on ``MapFullError``
  (the transaction is retried), so a shard never fails for lack of map space;
- fsync is off, as in the paper (VI-A): lineage is a cache that re-execution can rebuild;
- the directory is published by ``rename``. A published shard from an earlier attempt is
  swapped out (renamed aside, then removed), so a retried task replaces rather than
  duplicates lineage; a shard of a *later* attempt is never replaced by an earlier one.
  A writer killed at any point leaves only a ``.tmp.*`` directory, which readers never see
  and the next writer of that chunk on the same host removes.

Reading (:class:`LmdbShard`): read-only, without locks (``lock=False``: shards are immutable
once published), one long-lived read transaction with zero-copy buffers for blobs and cell
index runs, and a second one returning ``bytes`` for entry tables: py-lmdb builds a
memoryview per value about ten times slower than a small ``bytes``, which made scanning a
million entries take seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
import uuid
import zlib
from itertools import islice
from pathlib import Path
from typing import Any, Iterator

import lmdb
import numpy as np

from encoders.base import EncodedShard, ShardData, SpatialIndex, Table
from encoders.formats.csr import offsets_from_lengths, run_starts, uniq
from subzero.cells import Ragged
from subzero.errors import StoreError
from subzero.jsonio import json_default
from subzero.lineage import ShardSpec

META = "meta.json"
DATA = "data.mdb"
BLOBS = "blobs"  # format 1: the named database holding the blobs
BLOB_KEY = b"blob:"  # format 2: the prefix of the blobs' keys in the main database
FORMAT = 2
_PAGE = 4096


def _key_bytes(keys: np.ndarray) -> list[bytes]:
    """8-byte big-endian keys as a list of bytes objects (what py-lmdb's putmulti takes)."""
    return np.ascontiguousarray(keys, dtype=">u8").view("V8").tolist()


def _estimate_map(enc: EncodedShard) -> int:
    n = 0
    for t in enc.tables:
        n += t.nbytes + 24 * len(t.keys)  # node headers, page pointers, slack
    n += sum(int(b.size) + _PAGE for b in enc.blobs.values())
    return int(n * 1.5) + (1 << 20)


def _packed_entries(t: Table) -> tuple[np.ndarray, list[bytes]]:
    """A packed table's distinct keys and, per key, its items' bytes one after the other."""
    keys = np.asarray(t.keys, dtype=np.uint64)
    starts = run_starts(keys)
    w = t.items.shape[1]
    buf = np.ascontiguousarray(t.items).tobytes()
    bounds = (np.append(starts, len(keys)) * w).tolist()
    return keys[starts], [buf[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def _write_lmdb(path: Path, enc: EncodedShard) -> tuple[dict[str, Any], dict[str, Any]]:
    """Write every table and blob in one transaction; returns the LMDB statistics of each
    table and of the main database (the tables' records and the blobs)."""
    for t in enc.tables:  # a reader would take such a table for format 1 blobs or a blob
        if t.name == BLOBS or t.name.encode().startswith(BLOB_KEY):
            raise ValueError(f"table name {t.name!r} is reserved for blobs")
    map_size = _estimate_map(enc)
    while True:
        env = lmdb.open(str(path), map_size=map_size, subdir=True, max_dbs=len(enc.tables),
                        lock=False, sync=False, metasync=False, readahead=False)
        try:
            with env.begin(write=True) as txn:
                stats: dict[str, Any] = {}
                for t in enc.tables:
                    db = env.open_db(t.name.encode(), txn=txn, dupsort=t.dupfixed,
                                     dupfixed=t.dupfixed)
                    keys = t.keys
                    if t.dupfixed:
                        w = t.items.shape[1]
                        vals = np.ascontiguousarray(t.items).view(f"V{w}").reshape(-1).tolist()
                    elif t.packed:  # one entry per key: its items, one after the other
                        keys, vals = _packed_entries(t)
                    else:
                        buf = t.values.values.tobytes()
                        o = t.values.offsets.tolist()
                        vals = [buf[a:b] for a, b in zip(o[:-1], o[1:])]
                    cur = txn.cursor(db)
                    consumed, added = cur.putmulti(zip(_key_bytes(keys), vals), append=True)
                    if added != len(keys):  # pragma: no cover - would be an encoder bug
                        raise RuntimeError(f"table {t.name}: {added} of {len(keys)} "
                                           "entries written (keys not sorted?)")
                    stats[t.name] = txn.stat(db)
                for name in sorted(enc.blobs):  # beside the tables' records: no append
                    txn.put(BLOB_KEY + name.encode(),
                            np.ascontiguousarray(enc.blobs[name]).tobytes())
            main = env.stat()  # the main database as committed
            env.close()
            return stats, main
        except lmdb.MapFullError:
            env.close()
            map_size *= 2  # the aborted transaction left nothing behind; retry bigger


def _rtree_props(ndim: int, path: str | None = None) -> Any:
    from rtree import index  # loads libspatialindex: only *Many shards need it

    p = index.Property()
    p.dimension = ndim
    p.pagesize = _PAGE
    # a node serializes 3 ints + its MBR, then per child an MBR, an id and a length:
    # size the nodes so a full one fits one page (the default 100 needs two)
    child = 16 * ndim + 12
    cap = max(4, (_PAGE - 12 - 32 * ndim) // child)
    p.leaf_capacity = cap
    p.index_capacity = cap
    p.fill_factor = 0.99
    if path is not None:
        p.storage = index.RT_Disk
        p.overwrite = True
    return p


def _write_rtree(base: Path, sp: SpatialIndex) -> None:
    from rtree import index  # loads libspatialindex: only *Many shards need it

    d = sp.mins.shape[1]
    p = _rtree_props(d, str(base))
    idx = index.Index(str(base), (np.ascontiguousarray(sp.ids, dtype=np.int64),
                                  np.ascontiguousarray(sp.mins, dtype=np.float64),
                                  np.ascontiguousarray(sp.maxs, dtype=np.float64)),
                      properties=p)
    idx.close()


def _open_private_copy(base: Path, properties: Any) -> Any:
    """The R-tree ``base`` opened from a private copy: libspatialindex writes its header
    and pages back when an index closes, and a published shard is never written (its
    checksum covers these files). libspatialindex keeps the copy's files open, so their
    names go at once: no copy outlives the reader, however its process ends."""
    from rtree import index  # loads libspatialindex: only *Many shards need it

    folder = Path(tempfile.mkdtemp(prefix="subzero-rtree-", dir=_scratch_root()))
    try:
        copy = folder / base.name
        for suffix in (".dat", ".idx"):
            shutil.copyfile(base.with_suffix(suffix), copy.with_suffix(suffix))
        return index.Index(str(copy), properties=properties)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _scratch_root() -> str | None:
    """Where readers keep private copies of R-trees: memory-backed ``/dev/shm`` when the
    system has it, else the temporary folder."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def _read_meta(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads((path / META).read_text())
    except (OSError, ValueError):
        return None


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (not Linux), or it just ended
        return True
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


def remove_unpublished(parent: str | os.PathLike) -> int:
    """Remove every temporary or set-aside shard under ``parent`` (a strategy's directory),
    whoever left it: call only once no writer can still be running there (its Spark job
    has ended), e.g. after a worker machine was lost mid-write. Returns how many."""
    parent = Path(parent)
    if not parent.is_dir():
        return 0
    gone = 0
    for p in [*parent.glob(".tmp.*"), *parent.glob(".old.*")]:
        shutil.rmtree(p, ignore_errors=True)
        gone += 1
    return gone


def _host() -> str:
    """This host's name without dots (dots separate the fields of temporary names)."""
    return socket.gethostname().replace(".", "_") or "host"


def _remove_stale_tmp(parent: Path, chunk: str, keep: Path) -> None:
    """Remove temporary and set-aside shards of ``chunk`` left by dead writers on this host
    (names end in ``.<host>.<pid>.<uuid>``; chunk keys contain dots, so parse from the end).
    One scan of ``parent`` by prefix: ``Path.glob`` would compile a pattern for every shard
    written, a large share of writing a small shard."""
    host = _host()
    prefixes = (f".tmp.{chunk}.", f".old.{chunk}.")
    with os.scandir(parent) as it:
        found = [parent / e.name for e in it if e.name.startswith(prefixes)]
    for p in found:
        if p == keep:
            continue
        parts = p.name.split(".")
        try:
            pid, phost = int(parts[-2]), parts[-3]
        except (ValueError, IndexError):
            continue
        if phost == host and not _pid_alive(pid):
            shutil.rmtree(p, ignore_errors=True)


class ShardWriter:
    """Builds one shard in a temporary directory and publishes it (or discards it)."""

    def __init__(self, spec: ShardSpec) -> None:
        self.spec = spec
        self.dest = Path(spec.path)
        self.tmp: Path | None = None

    def _make_tmp(self) -> Path:
        parent = self.dest.parent
        name = (f".tmp.{self.dest.name}.{self.spec.attempt}.{_host()}."
                f"{os.getpid()}.{uuid.uuid4().hex[:8]}")
        self.tmp = parent / name
        try:  # the strategy's folder exists for all but its first shard
            self.tmp.mkdir()
        except FileNotFoundError:
            parent.mkdir(parents=True, exist_ok=True)
            self.tmp.mkdir()
        return self.tmp

    def write(self, enc: EncodedShard, stats: dict[str, Any]) -> dict[str, Any]:
        """Write and publish; returns ``stats`` completed with path and byte counts."""
        tmp = self._make_tmp()
        meta = dict(enc.meta)
        meta["tables"] = {t.name: t.kind for t in enc.tables}
        meta["item_bytes"] = {t.name: int(t.items.shape[1]) for t in enc.tables if t.has_items}
        bits = {t.name: int(t.bucket_bits) for t in enc.tables
                if t.has_items and t.bucket_bits != 8}
        if bits:  # absent: every cell index has 256-cell runs (as before it could differ)
            meta["bucket_bits"] = bits
        meta["rtree_dims"] = {sp.name: int(sp.mins.shape[1]) for sp in enc.rtrees}
        t0 = time.perf_counter()
        if enc.tables or enc.blobs:
            meta["lmdb"], meta["lmdb_main"] = _write_lmdb(tmp, enc)
        for sp in enc.rtrees:
            if len(sp.ids):  # an empty tree is simply absent
                _write_rtree(tmp / f"rtree_{sp.name}", sp)
        with os.scandir(tmp) as it:  # one listing: sizes, and the files to checksum
            sizes = {e.name: e.stat().st_size for e in it}
        stats = dict(stats)
        stats["data_bytes"] = sum(n for f, n in sizes.items() if f.startswith("data.mdb"))
        stats["index_bytes"] = sum(n for f, n in sizes.items() if f.startswith("rtree_"))
        stats["logical_bytes"] = enc.logical_bytes
        stats["write_s"] = time.perf_counter() - t0
        stats["attempt"] = int(self.spec.attempt)
        meta["format"] = FORMAT
        meta["attempt"] = int(self.spec.attempt)
        meta["files"] = sizes
        stats["path"] = str(self.dest)
        meta["stats"] = stats
        text = json.dumps(meta, default=json_default).encode()
        with open(tmp / META, "wb") as f:
            f.write(text)
        crcs = {name: _crc32(tmp / name) for name in sizes}
        crcs[META] = zlib.crc32(text)  # what was just written, not read back
        stats = dict(stats, checksum=_checksum_text(crcs))  # every file, meta.json too
        return self.publish(stats)

    def publish(self, stats: dict[str, Any]) -> dict[str, Any]:
        assert self.tmp is not None
        parent = self.dest.parent
        for tries in range(1000):
            try:
                os.rename(self.tmp, self.dest)
                break
            except OSError:
                if not self.dest.exists():
                    if tries > 10:
                        raise
                    continue  # it vanished between the calls: try again
                old = _read_meta(self.dest)
                if old is not None and int(old.get("attempt", 0)) > self.spec.attempt:
                    # a later attempt already published this chunk: keep its shard
                    shutil.rmtree(self.tmp, ignore_errors=True)
                    self.tmp = None
                    return dict(old.get("stats", {}), path=str(self.dest),
                                checksum=shard_checksum(self.dest))
                aside = parent / (f".old.{self.dest.name}.{_host()}.{os.getpid()}."
                                  f"{uuid.uuid4().hex[:8]}")
                try:
                    os.rename(self.dest, aside)
                except OSError:
                    continue  # someone else moved it first: try again
                shutil.rmtree(aside, ignore_errors=True)
        else:  # pragma: no cover - endless contention
            raise RuntimeError(f"could not publish shard {self.dest}")
        self.tmp = None
        _remove_stale_tmp(parent, self.dest.name, self.dest)
        return stats

    def abort(self) -> None:
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


# ---------------------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------------------


class LmdbShard(ShardData):
    """Read-only access to a published shard (no locks; one read transaction).

    Blobs are read from the main database (format 2) or, in a shard whose metadata lists
    a ``blobs`` database (format 1), from that one."""

    def __init__(self, path: str | os.PathLike, meta: dict[str, Any]) -> None:
        self.path = Path(path)
        self.meta = meta
        self._env = None
        self._txn = None    # zero-copy buffers: blobs, dupfixed runs
        self._btxn = None   # bytes values: entry tables (opened on first use)
        self._dbs: dict[str, Any] = {}
        self._blob_db = None      # the blobs' database (None: the main one)
        self._blob_key = BLOB_KEY  # their keys' prefix there
        self._rtrees: dict[str, Any] = {}
        self._cursors: dict[str, Any] = {}
        if (self.path / DATA).exists():
            names = list(meta.get("lmdb", {}))
            self._env = lmdb.open(str(self.path), readonly=True, lock=False, subdir=True,
                                  max_dbs=max(1, len(names)), readahead=False)
            # open every database before any long-lived transaction, in py-lmdb's own
            # committed one: only such handles may serve two transactions (mdb_dbi_open)
            for name in names:
                dup = name != BLOBS and meta.get("tables", {}).get(name) == "dupfixed"
                self._dbs[name] = self._env.open_db(name.encode(), create=False,
                                                    dupsort=dup, dupfixed=dup)
            if BLOBS in self._dbs:  # format 1: blobs in a named database, keyed by name
                self._blob_db, self._blob_key = self._dbs[BLOBS], b""
            self._txn = self._env.begin(buffers=True)

    def _db(self, name: str) -> Any:
        return self._dbs[name]

    def _bytes_cursor(self, table: str) -> Any:
        if self._btxn is None:
            self._btxn = self._env.begin(buffers=False)
        return self._btxn.cursor(self._dbs[table])

    def has_table(self, name: str) -> bool:
        return self._env is not None and name in self.meta.get("lmdb", {})

    def _packed(self, table: str) -> bool:
        return self.meta.get("tables", {}).get(table) == "packed"

    def items(self, table: str, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        w = int(self.meta.get("item_bytes", {}).get(table, 1))
        if not self.has_table(table) or len(keys) == 0:
            return np.empty(0, dtype=np.uint64), np.empty((0, w), dtype=np.uint8)
        cur = self._txn.cursor(self._db(table))
        if self._packed(table):  # one entry per key: its items, one after the other
            got = cur.getmulti(_key_bytes(keys), keyfixed=False)
            if not got:
                return np.empty(0, dtype=np.uint64), np.empty((0, w), dtype=np.uint8)
            ks = np.frombuffer(b"".join([k for k, _ in got]), dtype=">u8").astype(np.uint64)
            n = np.fromiter((len(v) // w for _, v in got), dtype=np.int64, count=len(got))
            items = np.frombuffer(b"".join([v for _, v in got]), dtype=np.uint8)
            return np.repeat(ks, n), items.reshape(-1, w)
        buf = cur.getmulti(_key_bytes(keys), dupdata=True, dupfixed_bytes=w, keyfixed=True)
        rec = np.frombuffer(buf, dtype=np.uint8).reshape(-1, 8 + w)
        k = np.ascontiguousarray(rec[:, :8]).view(">u8").reshape(-1).astype(np.uint64)
        return k, rec[:, 8:]

    def run_items(self, table: str, key: int) -> bytes:
        if not self.has_table(table):
            return b""
        w = int(self.meta.get("item_bytes", {}).get(table, 1))
        cur = self._cursors.get(table)
        if cur is None:  # one per table for the reader's life (its transaction's too)
            cur = self._cursors[table] = self._txn.cursor(self._db(table))
        if self._packed(table):
            v = cur.get(int(key).to_bytes(8, "big"))
            return b"" if v is None else bytes(v)
        return bytes(cur.getmulti([int(key).to_bytes(8, "big")], dupdata=True,
                                  dupfixed_bytes=w, keyfixed=True))

    def all_keys(self, table: str) -> np.ndarray:
        if not self.has_table(table):
            return np.empty(0, dtype=np.uint64)
        cur = self._bytes_cursor(table)
        ks = b"".join(list(cur.iternext_nodup(keys=True, values=False)))
        return np.frombuffer(ks, dtype=">u8").astype(np.uint64)

    def values(self, table: str, keys: np.ndarray) -> tuple[np.ndarray, Ragged]:
        if not self.has_table(table) or len(keys) == 0:
            return np.empty(0, dtype=np.uint64), Ragged.empty(0, np.uint8)
        got = self._bytes_cursor(table).getmulti(_key_bytes(keys))
        return self._pack(got)

    @staticmethod
    def _pack(got: list[tuple[Any, Any]]) -> tuple[np.ndarray, Ragged]:
        if not got:
            return np.empty(0, dtype=np.uint64), Ragged.empty(0, np.uint8)
        ks = np.frombuffer(b"".join([k for k, _ in got]), dtype=">u8").astype(np.uint64)
        vs = [v for _, v in got]
        lens = np.fromiter(map(len, vs), dtype=np.int64, count=len(vs))
        vals = np.frombuffer(b"".join(vs), dtype=np.uint8)
        return ks, Ragged(vals, offsets_from_lengths(lens))

    def scan(self, table: str, batch: int = 65536) -> Iterator[tuple[np.ndarray, Ragged]]:
        if not self.has_table(table):
            return
        cur = self._bytes_cursor(table)
        if not cur.first():
            return
        it = cur.iternext(keys=True, values=True)
        while True:
            got = list(islice(it, batch))
            if not got:
                return
            yield self._pack(got)

    def blob(self, name: str) -> np.ndarray:
        if self._env is None:
            return np.empty(0, dtype=np.uint8)
        v = self._txn.get(self._blob_key + name.encode(), db=self._blob_db)
        return np.empty(0, dtype=np.uint8) if v is None else np.frombuffer(v, dtype=np.uint8)

    def blob_names(self) -> list[str]:
        """The names of every blob (for ``subzero verify``, which reads them all)."""
        if self._env is None:
            return []
        cur = self._txn.cursor(self._blob_db)
        names: list[str] = []
        if cur.set_range(self._blob_key):  # the blobs' keys sort together, from the prefix
            for k in cur.iternext(keys=True, values=False):
                k = bytes(k)
                if not k.startswith(self._blob_key):
                    break
                names.append(k[len(self._blob_key):].decode())
        cur.close()
        return names

    def rtree_query(self, name: str, mins: np.ndarray, maxs: np.ndarray) -> np.ndarray:
        if name not in self._rtrees:
            from rtree import index  # loads libspatialindex: only *Many shards need it

            base = self.path / f"rtree_{name}"
            if not base.with_suffix(".dat").exists():
                self._rtrees[name] = None
            else:
                d = int(self.meta["rtree_dims"][name])
                p = _rtree_props(d)
                self._rtrees[name] = _open_private_copy(base, p)
        tree = self._rtrees[name]
        if tree is None or len(mins) == 0:
            return np.empty(0, dtype=np.int64)
        ids, _ = tree.intersection_v(np.ascontiguousarray(mins, dtype=np.float64),
                                     np.ascontiguousarray(maxs, dtype=np.float64))
        return uniq(ids)

    def close(self) -> None:
        for t in self._rtrees.values():
            if t is not None:
                t.close()
        self._rtrees.clear()
        for c in self._cursors.values():
            c.close()
        self._cursors.clear()
        for t in (self._btxn, self._txn):
            if t is not None:
                t.abort()
        self._txn = self._btxn = None
        if self._env is not None:
            self._env.close()
            self._env = None


def _crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc


def shard_checksum(path: str | os.PathLike) -> str:
    """A published shard's checksum, as recorded in the catalog (``shards.checksum``):
    ``crc32:NAME=HEX,...``, the CRC-32 of every file of the shard directory by name (the
    LMDB environment, R-trees, ``meta.json``), so a mismatch names the damaged file.

    CRC-32 detects the damage a disk or a stray write does (any burst up to 32 bits, any
    odd number of flipped bits) cheaply; shards are not secrets.
    """
    return _checksum_text({f.name: _crc32(f) for f in Path(path).iterdir() if f.is_file()})


def _checksum_text(crcs: dict[str, int]) -> str:
    """``crc32:NAME=HEX,...`` of each file's CRC-32, by name."""
    return "crc32:" + ",".join(f"{name}={crcs[name]:08x}" for name in sorted(crcs))


def check_shard_files(path: str | os.PathLike, checksum: str | None) -> str | None:
    """What is wrong with the files of the shard at ``path`` against its recorded
    ``checksum`` (None: nothing; no checksum recorded: only that the directory exists)."""
    p = Path(path)
    if not p.is_dir():
        return "missing" if not p.exists() else "not a directory"
    if not checksum:
        return None
    want = dict(kv.split("=", 1) for kv in checksum.removeprefix("crc32:").split(",") if kv)
    have = {f.name: f for f in p.iterdir() if f.is_file()}
    for name, crc in sorted(want.items()):
        if name not in have:
            return f"file {name} missing"
        try:
            got = f"{_crc32(have[name]):08x}"
        except OSError as e:
            return f"file {name} unreadable ({e.strerror or e})"
        if got != crc:
            return f"file {name} does not match its checksum (crc32 {got}, recorded {crc})"
    extra = sorted(set(have) - set(want))
    if extra:
        return f"unexpected file {extra[0]}"
    return None


def read_meta(path: str | os.PathLike) -> dict[str, Any]:
    """A published shard's metadata; raises :class:`subzero.errors.StoreError` if absent."""
    meta = _read_meta(Path(path))
    if meta is None:
        raise StoreError(f"{path} is not a lineage shard (no readable {META})")
    if int(meta.get("format", 0)) > FORMAT:
        raise StoreError(f"shard {path} has format {meta['format']}; this SubZero reads up "
                         f"to {FORMAT}")
    return meta
