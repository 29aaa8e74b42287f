"""The arrays of a derived run, copy on write: they share the parent's chunk files until
they are written.

A run derived from another (a what-if replay, :mod:`subzero.replay`) lives in its own
directory and never writes a file of its parent's::

    runs/<new>/manifest.json            the parent's (and its params/ files): hard links
    runs/<new>/arrays/<a>.zarr          unchanged arrays: a symbolic link to the parent's
                                        changed arrays: the parent's chunk files as hard
                                        links, each rewritten chunk a new file renamed
                                        over its link

:class:`CowStore` holds what the derived run reads and writes while it is built: the
parent's chunks, decoded once (in the background where they can be foreseen) and kept
while they may be read again, up to :data:`CACHE_BYTES`; the rewritten chunks, patched in
memory and written by I/O threads (:class:`subzero.pools.PriorityPool`) that run every
read before any write. Arrays whose chunk files :class:`ChunkFiles` cannot read and write
directly (text) go through zarr.
"""

from __future__ import annotations

import os
import shutil
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from subzero import settings
from subzero.cells import Box, to_coords
from subzero.engine import layout
from subzero.engine.arrays import RAW_BELOW, create_array, item_span, read_box, write_block
from subzero.engine.chunkstore import ChunkFiles, PartChunk
from subzero.engine.runs import LoadedRun
from subzero.frontier import Frontier
from subzero.pools import PriorityPool

__all__ = ["CowStore", "differs", "Key", "READ", "WRITE", "CACHE_BYTES", "WRITERS",
           "IO_NICE", "RAW_BELOW"]


def _cache_bytes() -> int:
    """an eighth of the memory, at most 1 GiB"""
    mem = settings.memory()
    return min(1 << 30, mem // 8) if mem else 1 << 30


#: at most this many bytes of decoded chunks held by one derived run (beyond it, chunks
#: are decoded again each time they are read); a share of the memory, as a replay runs
#: beside Spark's own workers
CACHE_BYTES = settings.define(
    "REPLAY_CACHE_BYTES", _cache_bytes, settings.size,
    "Bytes of decoded chunks one replay holds, the parent's and its own rewritten ones; "
    "beyond it a chunk is decoded again each time it is read.",
    benchmark="benchmarks/bench_replay.py", module=__name__)
#: I/O threads reading the parent's chunks and writing the rewritten ones while the
#: operators compute
WRITERS = settings.define(
    "REPLAY_WRITERS", 2, int,
    "Threads that read the parent's chunks and write the rewritten ones while a replay's "
    "operators compute.",
    benchmark="benchmarks/bench_replay.py", module=__name__)
#: how much lower the I/O threads run than the thread computing (their nice), so that
#: reading and writing chunks never takes a core from the kernels every step waits for
IO_NICE = settings.define(
    "REPLAY_IO_NICE", 5, int,
    "How much lower (in nice values) a replay's I/O threads run than the thread "
    "computing, so that chunk I/O never takes a core from the kernels.",
    benchmark="benchmarks/bench_replay.py", module=__name__)

#: a chunk's grid index; held chunks are keyed by (array, chunk index)
Key = tuple[int, ...]
#: the ranks of the I/O threads' work: reads before writes, and the reads of an earlier
#: step (an operator's index in run order, -1: now) before a later one's
READ, WRITE = 0, 1


def differs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cells whose values differ bit for bit (NaN equals the same NaN; -0.0 is not 0.0).

    Parameters
    ----------
    a, b
        Arrays of the same shape.

    Returns
    -------
    numpy.ndarray
        A bool array of that shape.

    Examples
    --------
    >>> differs(np.array([1.0, np.nan, 0.0]), np.array([1.0, np.nan, -0.0])).tolist()
    [False, False, True]
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind in "biufc" and a.dtype == b.dtype and a.dtype.itemsize in (1, 2, 4, 8):
        view = np.dtype(f"u{a.dtype.itemsize}")
        return np.ascontiguousarray(a).view(view) != np.ascontiguousarray(b).view(view)
    return np.asarray(a != b, dtype=bool)


def _chunks_hit(cells: Frontier, chunks: Sequence[int]) -> set[Key] | None:
    """The chunks (grid indices) holding some of ``cells`` when they are few (None
    otherwise: ask each chunk)."""
    if not cells.sparse:
        return None
    return set(map(tuple, np.unique(to_coords(cells.lin, cells.shape)
                                    // np.asarray(chunks, dtype=np.int64), axis=0).tolist()))


def _symlink(target: Path, path: Path) -> None:
    """``path`` a symbolic link to directory ``target``, relative (a home moves whole)."""
    os.symlink(os.path.relpath(target, path.parent), path, target_is_directory=True)


def _link_chunk(src: Path, dst: Path) -> None:
    """Chunk file ``dst`` the same file as ``src`` (its folder made if need be)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    _link(str(src), str(dst))


def _link(src: str, dst: str) -> None:
    """``dst`` the same file as ``src`` (a hard link; a copy where links are refused)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _copy_chunks(src: Path, dst: Path, keys: Sequence[Key], meta: bytes | None = None
                 ) -> None:
    """Array ``dst``, chunk by chunk, from array ``src``: its metadata (``meta``: its
    bytes, when known), and its chunk files ``keys`` as hard links (the others are written
    anew)."""
    dst.mkdir(exist_ok=True)  # a rewritten chunk's write may have made it already
    if meta is None:
        shutil.copyfile(src / "zarr.json", dst / "zarr.json")
    else:  # a copy of its own: zarr rewrites an array's metadata in place
        with open(dst / "zarr.json", "wb") as f:
            f.write(meta)
    src_c, dst_c, made = str(src / "c"), str(dst / "c"), set()
    for k in keys:
        rel = [str(i) for i in k]
        folder = os.path.join(dst_c, *rel[:-1])
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        _link(os.path.join(src_c, *rel), os.path.join(folder, rel[-1]))


def _values(entry: Any, span: tuple[int, int] | None = None) -> np.ndarray:
    """A held chunk's cells (``span``: the items needed; None: all)."""
    return entry.get(span) if isinstance(entry, PartChunk) else entry


def _read_part(files: ChunkFiles, key: Key, span: tuple[int, int]) -> PartChunk:
    part = files.part(key)
    part.get(span)
    return part


@dataclass
class CowStore:
    """The arrays of run ``rid`` derived from ``parent`` while it is built, and the chunks
    held in memory.

    Arrays whose chunks :class:`ChunkFiles` can read and write directly (numeric, Blosc)
    are handled chunk by chunk: the parent's chunks are decoded once and kept while they
    may be read again (:meth:`release` forgets them); a rewritten array starts as hard
    links to the parent's chunk files and each chunk it rewrites is written whole, in the
    background, to a new file renamed over the link. Other arrays (text) go through zarr.

    Parameters
    ----------
    parent
        The run derived from (its ``memo`` keeps what is worked out of its files).
    rid
        The derived run's id.
    home
        The home holding both.
    """

    parent: LoadedRun
    rid: str
    home: Path
    present: set[str] = field(default_factory=set)  # arrays the derived run holds
    paths: dict[str, Path] = field(default_factory=dict)  # see path
    written: set[str] = field(default_factory=set)  # arrays it holds its own copy of
    #: the derived run's chunk files of the arrays it rewrites chunk by chunk
    fast: dict[str, ChunkFiles] = field(default_factory=dict)
    own: dict[str, set[Key]] = field(default_factory=dict)  # chunks rewritten, per array
    dirty: dict[str, set[Key]] = field(default_factory=dict)  # rewritten, not yet written
    #: per rewritten chunk patched from the parent's, the items (C order within the chunk)
    #: that may differ from the parent's file: where its Blosc blocks are compressed again
    spans: dict[tuple[str, Key], tuple[int, int]] = field(default_factory=dict)
    #: decoded chunks: the parent's (or the future decoding one), and the rewritten ones;
    #: each an array, or a :class:`PartChunk` decoding blocks as they are read
    old_chunks: dict[tuple[str, Key], Any] = field(default_factory=dict)
    new_chunks: dict[tuple[str, Key], Any] = field(default_factory=dict)
    held: int = 0  # bytes of the chunks held in ``old_chunks`` and ``new_chunks``
    chunk_writes: dict[tuple[str, Key], Future] = field(default_factory=dict)
    #: writes still in flight, per array (links, copies, zarr block writes)
    writes: dict[str, list[Future]] = field(default_factory=dict)
    pool: PriorityPool = field(default_factory=lambda: PriorityPool(
        WRITERS, "subzero-replay-io", nice=IO_NICE))

    def create(self) -> None:
        """The derived run's directory: its arrays' folder, and the parent's manifest and
        parameter files as its own (a run's manifest is written once, when it is made)."""
        home, rid, pid = self.home, self.rid, self.parent.id
        layout.arrays_dir(home, rid).mkdir(parents=True, exist_ok=False)
        _link(str(layout.manifest_path(home, pid)), str(layout.manifest_path(home, rid)))
        params = layout.params_dir(home, pid)
        if params.is_dir():
            for f in params.iterdir():
                _link_chunk(f, layout.params_dir(home, rid) / f.name)

    def background(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Run ``fn(*args)`` on an I/O thread, after every read queued (a write)."""
        return self.pool.submit((WRITE, 0), fn, *args)

    def path(self, name: str) -> Path:
        """The derived run's array ``name``."""
        got = self.paths.get(name)
        if got is None:
            got = self.paths[name] = layout.array_path(self.home, self.rid, name)
        return got

    def parent_path(self, name: str) -> Path:
        """The parent's array ``name``."""
        return layout.array_path(self.home, self.parent.id, name)

    def parent_dir(self, name: str) -> Path:
        """The directory holding the parent's array ``name`` (its links resolved)."""
        memo = self.parent.memo
        got = memo.get(("dir", name))
        if got is None:
            path = self.parent_path(name)  # a derived parent's unchanged arrays are links
            got = memo["dir", name] = path.resolve() if path.is_symlink() else path
        return got

    def link(self, name: str) -> None:
        """Reference the parent's array (unchanged): a relative symbolic link, made by an
        I/O thread (:meth:`wait` waits for it too)."""
        self.writes.setdefault(name, []).append(
            self.background(_symlink, self.parent_dir(name), self.path(name)))
        self.present.add(name)

    def ensure(self, name: str) -> None:
        """Array ``name`` in the derived run: the parent's, linked, unless already there."""
        if name not in self.present:
            self.link(name)

    # -- the parent's chunks ----------------------------------------------------------------
    def parent_files(self, name: str) -> ChunkFiles | None:
        """The parent's chunk files of ``name`` (None: read through zarr), worked out once
        per loaded parent (its arrays never change)."""
        memo = self.parent.memo
        if ("files", name) not in memo:
            memo["files", name] = ChunkFiles.open(self.parent_dir(name))
        return memo["files", name]

    def _nbytes(self, files: ChunkFiles, key: Key) -> int:
        return files.box(key).size * files.dtype.itemsize

    def prefetch(self, name: str, keys: Sequence[Key], step: int = -1, box: Box | None = None
                 ) -> None:
        """Start decoding the parent's chunks ``keys`` of ``name`` in the background, for
        the operator ``step`` of the run order (-1: now): whole, or (``box``) the blocks
        holding ``box``'s cells (the rest when they are read)."""
        files = self.parent_files(name)
        if files is None:
            return
        for k in keys:
            n = self._nbytes(files, k)
            if (name, k) not in self.old_chunks and self.held + n <= CACHE_BYTES:
                self.held += n
                if box is None:
                    self.old_chunks[(name, k)] = self.pool.submit((READ, step), files.read, k)
                else:
                    cb = files.box(k)
                    self.old_chunks[(name, k)] = self.pool.submit(
                        (READ, step), _read_part, files, k,
                        item_span(cb.intersect(box), cb, files.chunks))

    def old_entry(self, name: str, key: Key, span: tuple[int, int] | None = None) -> Any:
        """The parent's chunk ``key`` of ``name`` as held (an array or a
        :class:`PartChunk`), with at least the items ``span`` decoded (None: all; a chunk
        first read for a span is decoded block by block)."""
        got = self.old_chunks.get((name, key))
        if isinstance(got, Future):
            if got.cancel():  # not started (the I/O threads are busy): decode it here
                del self.old_chunks[(name, key)]
                files = self.parent_files(name)
                assert files is not None
                self.held -= self._nbytes(files, key)
                got = None
            else:
                got = self.old_chunks[(name, key)] = self.pool.result(got)
        if got is None:
            files = self.parent_files(name)
            assert files is not None
            got = files.read(key) if span is None else files.part(key)
            if self.held + got.nbytes <= CACHE_BYTES:
                self.held += got.nbytes
                self.old_chunks[(name, key)] = got
        _values(got, span)
        return got

    def old_chunk(self, name: str, key: Key, span: tuple[int, int] | None = None
                  ) -> np.ndarray:
        """The parent's chunk ``key`` of ``name`` (``span``: the items needed)."""
        return _values(self.old_entry(name, key, span), span)

    def old_box(self, name: str, box: Box) -> np.ndarray:
        """The parent's values of ``name`` in ``box``."""
        files = self.parent_files(name)
        if files is None:
            return read_box(self.parent_path(name), box)
        return files.assemble(box, lambda k, sp: self.old_chunk(name, k, sp))

    # -- the derived run's values -----------------------------------------------------------
    def new_chunk(self, name: str, key: Key, span: tuple[int, int] | None = None
                  ) -> np.ndarray:
        """The derived run's chunk ``key`` of ``name`` (``span``: the items needed)."""
        got = self.new_chunks.get((name, key))
        if got is not None:
            return _values(got, span)
        if key not in self.own.get(name, ()):
            return self.old_chunk(name, key, span)  # not rewritten: the parent's file
        write = self.chunk_writes.get((name, key))
        if write is not None:
            self.pool.result(write)
        return self.fast[name].read(key)

    def new_box(self, name: str, box: Box) -> np.ndarray:
        """The derived run's values of ``name`` in ``box`` (as rewritten so far)."""
        if name not in self.written:
            return self.old_box(name, box)
        files = self.fast.get(name)
        if files is None:
            self.wait(name)
            return read_box(self.path(name), box)
        return files.assemble(box, lambda k, sp: self.new_chunk(name, k, sp))

    def copy(self, name: str, whole: bool, rewrite: set[Key] | None) -> None:
        """The derived run's own copy of array ``name`` to rewrite tiles of. Chunk by chunk
        (``rewrite``: the chunks that will be rewritten): the parent's metadata, and hard
        links to the parent's other chunk files. Otherwise through zarr: a new empty array
        when ``whole`` will be rewritten, else every chunk file copied (zarr rewrites a
        chunk file in place, so it must never be a link)."""
        info = self.parent.arrays[name]
        dst = self.path(name)
        files = self.parent_files(name) if rewrite is not None else None
        if files is not None:  # made by an I/O thread (done before the run completes)
            keep = [] if whole else [k for k in files.keys() if k not in rewrite]
            self.writes.setdefault(name, []).append(
                self.background(_copy_chunks, files.path, dst, keep, files.meta))
            self.fast[name] = ChunkFiles(dst, files.shape, files.chunks, files.dtype,
                                         files.fill, files.codec, files.crc)
            self.own[name] = set()
        elif whole:
            op = self.parent.workflow.ops[name]
            create_array(dst, op.out_shape, op.out_dtype, info["chunks"])
        else:
            shutil.copytree(self.parent_path(name).resolve(), dst, symlinks=False)
        self.present.add(name)
        self.written.add(name)

    def store(self, name: str, box: Box, block: np.ndarray, compare: bool = True
              ) -> np.ndarray | None:
        """Record the new values ``block`` of the cells ``box`` of ``name`` (written by
        :meth:`flush`, or now in the background through zarr). Chunk by chunk, returns
        which cells of ``box`` differ from the parent's (compared as each chunk is
        patched; None through zarr: the caller compares). Without ``compare``, a block
        that is a whole chunk is kept without reading the parent's (its cells in the
        result: True)."""
        files = self.fast.get(name)
        if files is None:
            self.writes.setdefault(name, []).append(
                self.background(write_block, self.path(name), box, block))
            return None
        keys = files.keys(box)
        # a block that is one chunk: its comparison is the answer (no copy into a mask)
        changed = None if len(keys) == 1 else np.zeros(box.shape, dtype=bool)
        for k in keys:
            cb = files.box(k)
            inter = cb.intersect(box)
            here, there = inter.relative_to(cb), inter.relative_to(box)
            new = np.asarray(block[there], dtype=files.dtype)
            span = item_span(inter, cb, files.chunks)
            entry = self.new_chunks.get((name, k))
            if entry is None and not compare and cb == box:
                entry = np.ascontiguousarray(block, dtype=files.dtype)
                self.held += entry.nbytes
                self.new_chunks[(name, k)] = entry
                chunk, diff = entry, np.broadcast_to(np.True_, box.shape)
            elif entry is None:
                old = self.old_entry(name, k, span)
                diff = differs(_values(old, span)[here], new)
                if cb == box:  # the block is the whole chunk (no other tile touches it)
                    entry = np.ascontiguousarray(block, dtype=files.dtype)
                else:  # the parent's chunk, patched: its decoded copy if this store owns it
                    entry = self._take(name, k, old)
                    self.spans[(name, k)] = span
                self.held += entry.nbytes
                self.new_chunks[(name, k)] = entry
                chunk = _values(entry, span)
            else:  # cells no other tile patched still hold the parent's values
                chunk = _values(entry, span)
                diff = differs(chunk[here], new)
                if (name, k) in self.spans:
                    a, z = span
                    lo, hi = self.spans[(name, k)]
                    self.spans[(name, k)] = (min(a, lo), max(z, hi))
            if cb != box:
                if not chunk.flags.writeable:  # a whole block kept as it came (a view)
                    chunk = self.new_chunks[(name, k)] = chunk.copy()
                chunk[here] = new
            self.own[name].add(k)
            self.dirty.setdefault(name, set()).add(k)
            if changed is None:
                changed = diff.reshape(box.shape)
            else:
                changed[there] = diff
        return changed

    def _take(self, name: str, key: Key, old: Any) -> Any:
        """The parent's chunk ``key`` of ``name`` (``old``, as :meth:`old_entry` holds it)
        to patch in place: the decoded copy itself, taken out of the cache (nothing reads
        the parent's values of a chunk once it is rewritten), or a copy where it is not
        this store's to change. A chunk decoded block by block stays so: its other blocks
        still hold the parent's values, decoded when read."""
        cached = self.old_chunks.get((name, key))
        part = isinstance(old, PartChunk)
        if cached is old and (part or old.flags.writeable):
            del self.old_chunks[(name, key)]
            self.held -= old.nbytes
            return old
        if cached is None and (part or old.flags.writeable):
            return old  # decoded for this call alone (the cache was full)
        values = _values(old)
        return np.array(values, dtype=values.dtype)

    def flush(self, name: str, changed: Frontier | None = None) -> None:
        """Write the chunks of ``name`` rewritten since the last flush (in the background);
        a chunk none of whose cells ``changed`` is the parent's file, linked."""
        files = self.fast.get(name)
        dirty = sorted(self.dirty.pop(name, ()))
        hit = None if changed is None or files is None else _chunks_hit(changed, files.chunks)
        for k in dirty:
            assert files is not None
            if changed is not None and not (k in hit if hit is not None
                                            else changed.meets(files.box(k))):
                parent = self.parent_files(name)
                assert parent is not None
                self.writes.setdefault(name, []).append(
                    self.background(_link_chunk, parent.file(k), files.file(k)))
                self.own[name].discard(k)
                self.held -= self.new_chunks.pop((name, k)).nbytes
                self.spans.pop((name, k), None)
                continue
            span = self.spans.pop((name, k), None)
            parent = self.parent_files(name) if span is not None else None
            entry = self.new_chunks[(name, k)]
            part = isinstance(entry, PartChunk)
            self.chunk_writes[(name, k)] = self.background(
                files.write, k, entry.array if part else entry, self.level(name, k),
                parent.file(k) if parent is not None else None, span,
                entry.get if part else None)

    def level(self, name: str, key: Key) -> int:
        """The Blosc level chunk ``key`` of ``name`` is rewritten at: 1, or 0 (stored raw)
        where the parent's chunk shrank by less than :data:`RAW_BELOW` (noisy floats:
        compressing costs more time than the bytes it saves)."""
        parent = self.parent_files(name)
        if parent is None:
            return 1
        memo = self.parent.memo  # the parent's files never change
        size = memo.get(("size", name, key))
        if size is None:
            try:
                size = memo["size", name, key] = parent.file(key).stat().st_size
            except OSError:
                return 1
        return 0 if self._nbytes(parent, key) < RAW_BELOW * size else 1

    def noisy(self, name: str) -> bool:
        """Whether every chunk of the parent's ``name`` is stored raw (:meth:`level` 0):
        noisy values, slow to decode and compare for the little they compress. An array
        read through zarr is not."""
        files = self.parent_files(name)
        return files is not None and not any(self.level(name, k) for k in files.keys())

    def release(self, names: set[str]) -> None:
        """Forget the chunks of ``names`` (nothing reads them again)."""
        for cache in (self.old_chunks, self.new_chunks):
            for nk in [nk for nk in cache if nk[0] in names]:
                v = cache.pop(nk)
                if isinstance(v, Future):
                    v = v.result()
                self.held -= v.nbytes

    def wait(self, name: str | None = None) -> None:
        """Until the writes of array ``name`` (None: every array) are done; raises the
        first that failed."""
        for key in [name] if name is not None else list(self.writes):
            for fut in self.writes.pop(key, []):
                fut.result()
        for nk in [nk for nk in self.chunk_writes if name is None or nk[0] == name]:
            self.chunk_writes.pop(nk).result()

    def finish(self) -> None:
        """Run the queued writes in the calling thread too (it has nothing left to
        compute), alongside the I/O threads; :meth:`wait` then waits for the rest."""
        self.pool.help()

    def shutdown(self, cancel: bool = False) -> None:
        """Stop the I/O threads once their work is done (``cancel``: drop what has not
        started)."""
        self.pool.shutdown(wait=True, cancel_futures=cancel)
