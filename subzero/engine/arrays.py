"""The zarr array store: every operator output of every run, chunked like its tasks.

Arrays are never overwritten ("no overwrite"): creating an array that exists is an error.
Where each array lives is :mod:`subzero.engine.layout`'s business.

Numeric arrays are compressed with Blosc's LZ4 after a bit shuffle: a run writes every
intermediate array, and on calibrated images this writes about twice as fast as zarr's
default Zstandard, reads three times as fast, and takes no more disk (measured on the
astronomy workflow's float64 arrays: 0.11 s against 0.23 s per 66 MB chunk, 4 MB against
6 MB on disk).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from subzero.cells import Box
from subzero.errors import StoreError


def _is_text(dtype: np.dtype) -> bool:
    return dtype.kind in ("U", "O", "T")


def _zarr_dtype(dtype: np.dtype) -> Any:
    # strings are stored as variable-length UTF-8 (numpy StringDType) so that the kernels,
    # zarr and the encoders agree on one representation
    return np.dtypes.StringDType() if _is_text(dtype) else dtype


def create_array(path: Path, shape: Sequence[int], dtype: Any, chunks: Sequence[int]) -> Any:
    """Create an empty zarr array; refuse to overwrite one that exists."""
    import zarr  # zarr only once an array is touched (slow to import)

    path = Path(path)
    if path.exists():
        raise StoreError(f"array {path.name[:-5]!r} already exists at {path} (no overwrite)")
    dtype = np.dtype(dtype)
    chunks = tuple(max(1, int(c)) for c in chunks) or ()
    fill = "" if _is_text(dtype) else 0
    compressors: Any = "auto" if _is_text(dtype) else [
        zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle")]
    try:
        return zarr.create_array(
            store=str(path), shape=tuple(shape), chunks=chunks, dtype=_zarr_dtype(dtype),
            fill_value=fill, overwrite=False, compressors=compressors,
        )
    except zarr.errors.ContainsArrayError:
        raise StoreError(
            f"array {path.name[:-5]!r} already exists at {path} (no overwrite)") from None


def open_array(path: Path, mode: str = "r") -> Any:
    import zarr  # zarr only once an array is touched (slow to import)

    path = Path(path)
    if not path.exists():
        raise StoreError(f"no array at {path}")
    return zarr.open_array(str(path), mode=mode)


def write_block(path: Path, box: Box, block: np.ndarray) -> None:
    """Write one block (a task's output chunk) into an existing array."""
    arr = open_array(path, "r+")
    if _is_text(np.asarray(block).dtype):
        # C-contiguous: zarr 3.1.6 scrambles string chunks written from transposed or
        # broadcast views (zarr-python issue 3558)
        block = np.ascontiguousarray(np.asarray(block, dtype=np.dtypes.StringDType()))
    arr[box.slices] = block


def read_box(path: Path, box: Box) -> np.ndarray:
    """Read the cells of ``box`` from the array at ``path``."""
    arr = open_array(path, "r")
    if box.ndim == 0:
        return np.asarray(arr[...])
    return np.asarray(arr[box.slices])


def read_array(path: Path) -> np.ndarray:
    arr = open_array(path, "r")
    return np.asarray(arr[...])


def write_array(path: Path, data: np.ndarray, chunks: Sequence[int]) -> None:
    """Create and fill a whole array (workflow inputs)."""
    create_array(path, data.shape, data.dtype, chunks)
    write_block(path, Box.full(data.shape), data)


def stored_bytes(path: Path) -> int:
    """Bytes the array takes on disk (all files under it)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def logical_bytes(shape: Sequence[int], dtype: Any) -> int:
    """Bytes of the array in memory (strings count their UTF-8 length on average 8)."""
    dtype = np.dtype(dtype)
    per = 8 if _is_text(dtype) else dtype.itemsize
    return int(np.prod(shape, dtype=np.int64)) * per
