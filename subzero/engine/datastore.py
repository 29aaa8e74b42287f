"""Where a home's files are kept: the home's own folder, or S3-compatible object storage
(``--home s3://bucket/prefix``) seen through a local folder.

An object-store home is *mounted* at a local folder of this machine (:func:`mount`: under
``$SUBZERO_CACHE``, else ``~/.cache/subzero``, named after the URL), and every path of the
home is a path under that folder, as for a local home: :mod:`subzero.engine.layout` and
every module that builds paths stay as they are. What reads and writes the home's files
asks this module where a path really is (:func:`mounted`):

- arrays' chunk files are objects, written and read by the tasks themselves
  (:func:`array_files`, an :class:`~subzero.engine.objectstore.S3ChunkStore`), so a task
  on any machine reads what another wrote, and nothing of an array is kept locally;
- a lineage shard is built in the task's local scratch folder, uploaded as immutable
  objects under a key unique to the task attempt (:func:`publish_shard`), and the driver
  records the winning attempt's key in the catalog; the objects of attempts that lost
  are deleted when the run ends (:func:`sweep_attempts`) or by ``subzero gc``. A reader
  fetches a shard once into the local cache, checked against the digest the catalog
  recorded (:func:`shard_folder`), and opens it read-only;
- the run's small files (``home.json``, the manifest, array parameters) are written
  locally and uploaded (:func:`push`), and fetched where missing (:func:`pull`).

The mount table is process state: the driver mounts a home when it resolves its URL, and
ships the table with every Spark task (:func:`table`, :func:`install`), so that executors
that share no folder with the driver reach the same objects.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from subzero.errors import StoreError

if TYPE_CHECKING:  # pragma: no cover
    from subzero.engine.chunkstore import ChunkFiles
    from subzero.engine.objectstore import ObjectStore, ShardCache

#: URL schemes of object-store homes
SCHEMES = ("s3://",)


def is_url(home: str | os.PathLike | None) -> bool:
    """Whether ``home`` names an object-store home (``s3://bucket/prefix``).

    >>> is_url("s3://lab/homes/alice"), is_url("/data/home"), is_url(None)
    (True, False, False)
    """
    return isinstance(home, str) and home.startswith(SCHEMES)


def cache_dir() -> Path:
    """This machine's cache of object-store homes: ``$SUBZERO_CACHE``, else
    ``~/.cache/subzero``."""
    return Path(os.environ.get("SUBZERO_CACHE") or Path.home() / ".cache" / "subzero")


def local_root(url: str) -> Path:
    """The local folder an object-store home is mounted at on this machine.

    >>> local_root("s3://lab/homes/alice").name[:-11]
    'lab-homes-alice'
    """
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", url[len("s3://"):].strip("/"))[:80]
    digest = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:10]
    return (cache_dir() / "homes" / f"{base}-{digest}").absolute()


@dataclass
class Mount:
    """An object-store home seen through a local folder.

    Attributes
    ----------
    url : str
        ``s3://bucket/prefix``.
    root : pathlib.Path
        The local folder the home's paths are under.
    """

    url: str
    root: Path
    _store: Any = field(default=None, repr=False)
    _shards: Any = field(default=None, repr=False)
    _checked: bool = field(default=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def store(self) -> "ObjectStore":
        """The home's objects (a client made at first use)."""
        if self._store is None:
            with self._lock:
                if self._store is None:
                    from subzero.engine.objectstore import ObjectStore

                    self._store = ObjectStore(self.url)
        return self._store

    @property
    def shards(self) -> "ShardCache":
        """The local cache of this home's shards, by digest."""
        if self._shards is None:
            from subzero.engine.objectstore import ShardCache

            self._shards = ShardCache(self.root / ".cache" / "shards")
        return self._shards

    def check(self) -> None:
        """Make sure the endpoint, credentials and bucket answer (once per process): a
        one-line :class:`~subzero.errors.StoreError` within seconds otherwise."""
        if not self._checked:
            self.store.check()
            self._checked = True

    def key(self, path: str | os.PathLike) -> str:
        """The object key of ``path`` (a path under :attr:`root`)."""
        rel = os.path.relpath(os.fspath(path), self.root)
        if rel == "." or rel.startswith(".."):
            raise StoreError(f"{path} is not inside the home {self.url}")
        return Path(rel).as_posix()


_MOUNTS: dict[str, Mount] = {}
_lock = threading.Lock()


def mount(url: str, root: str | os.PathLike | None = None) -> Path:
    """Mount the object-store home ``url`` (at ``root``, else :func:`local_root`) and
    return the local folder its paths are under.

    Raises
    ------
    StoreError
        ``url`` is not ``s3://bucket/prefix``.
    """
    from subzero.engine.objectstore import parse_url

    parse_url(url)  # a malformed URL is refused here, in one line
    path = Path(root).absolute() if root is not None else local_root(url)
    with _lock:
        got = _MOUNTS.get(str(path))
        if got is None or got.url != url:
            _MOUNTS[str(path)] = Mount(url, path)
    return path


def table() -> dict[str, str]:
    """The mounts of this process, ``{local folder: URL}``, for Spark tasks
    (:func:`install`)."""
    with _lock:
        return {root: m.url for root, m in _MOUNTS.items()}


def install(mounts: Mapping[str, str]) -> None:
    """Mount what the driver mounted (in a Spark task, before it touches the home)."""
    for root, url in mounts.items():
        got = _MOUNTS.get(root)
        if got is None or got.url != url:
            mount(url, root)


def mounted(path: str | os.PathLike | None) -> Mount | None:
    """The mount ``path`` is under, or None (a local home's path)."""
    if path is None or not _MOUNTS:
        return None
    p = os.fspath(path)
    for root, m in list(_MOUNTS.items()):
        if p == root or p.startswith(root + os.sep):
            return m
    return None


def remote_url(home: str | os.PathLike) -> str | None:
    """The URL of the object-store home mounted at ``home``, or None."""
    m = mounted(home)
    return None if m is None or os.fspath(home) != str(m.root) else m.url


def home_name(home: str | os.PathLike) -> str:
    """How messages name ``home``: its URL when it is an object-store home's mount, else
    its path.

    >>> home_name("/data/home")
    '/data/home'
    """
    return remote_url(home) or os.fspath(home)


# -- small files ----------------------------------------------------------------------------
def push(path: str | os.PathLike) -> None:
    """Upload the local file ``path`` of a mounted home (nothing for a local home)."""
    m = mounted(path)
    if m is not None:
        m.store.put_file(m.key(path), path)


def pull(path: str | os.PathLike) -> bool:
    """Make sure the file ``path`` of a mounted home is here, fetched when missing; False
    when the object does not exist either (always True for a local home's existing
    file)."""
    p = Path(path)
    if p.is_file():
        return True
    m = mounted(p)
    if m is None:
        return False
    p.parent.mkdir(parents=True, exist_ok=True)
    try:
        m.store.get_file(m.key(p), p)
    except FileNotFoundError:
        return False
    return True


# -- arrays ---------------------------------------------------------------------------------
_FILES: dict[str, "ChunkFiles | None"] = {}
_files_lock = threading.Lock()


def array_exists(path: str | os.PathLike) -> bool:
    """Whether a mounted home has an array at ``path`` (its ``zarr.json``)."""
    m = mounted(path)
    assert m is not None
    return m.store.exists(f"{m.key(path)}/zarr.json")


def put_array_metadata(path: str | os.PathLike, text: bytes) -> None:
    """Store an array's ``zarr.json`` in a mounted home."""
    m = mounted(path)
    assert m is not None
    m.store.put(f"{m.key(path)}/zarr.json", text)
    with _files_lock:
        _FILES.pop(os.fspath(path), None)


def array_files(path: str | os.PathLike) -> "ChunkFiles | None":
    """The array at ``path`` of a mounted home as
    :class:`~subzero.engine.chunkstore.ChunkFiles` over its objects (None: not an array
    that class reads; :class:`~subzero.errors.StoreError` when there is none)."""
    key = os.fspath(path)
    with _files_lock:
        if key in _FILES:
            return _FILES[key]
    m = mounted(path)
    assert m is not None
    from subzero.engine.objectstore import open_files

    try:
        files = open_files(m.store, m.key(path))
    except FileNotFoundError:
        raise StoreError(f"no array at {m.url.rstrip('/')}/{m.key(path)}") from None
    with _files_lock:
        _FILES[key] = files
    return files


def stored_bytes(path: str | os.PathLike) -> int:
    """Bytes of the objects under ``path`` of a mounted home."""
    m = mounted(path)
    assert m is not None
    return sum(m.store.sizes(m.key(path)).values())


# -- shards ---------------------------------------------------------------------------------
def scratch_dir() -> Path:
    """Where a task builds a shard before uploading it: Spark's local folder when set,
    else the system's temporary folder (never the home)."""
    base = (os.environ.get("SPARK_LOCAL_DIRS") or "").split(",")[0] or tempfile.gettempdir()
    return Path(base)


def publish_shard(dest: str | os.PathLike, attempt: int,
                  write: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """Build a shard of a mounted home in local scratch with ``write(path)`` (which
    returns its statistics), upload it under a key unique to this attempt
    (``<dest>/a<attempt>-<id>``) and return the statistics with that ``path``.

    The local copy is removed whatever happens: an executor keeps nothing of the home.
    """
    m = mounted(dest)
    assert m is not None
    scratch = Path(tempfile.mkdtemp(prefix="subzero-shard-", dir=scratch_dir()))
    try:
        stats = write(scratch / "shard")
        if stats.get("path") is None:
            return stats  # nothing written (the same pairs as another strategy's shard)
        where = Path(dest) / f"a{int(attempt)}-{uuid.uuid4().hex[:8]}"
        from subzero.engine.objectstore import upload_shard

        up = upload_shard(m.store, stats["path"], m.key(where))
        return dict(stats, path=str(where), checksum=up["checksum"])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def shard_folder(home: str | os.PathLike, row: Mapping[str, Any], fetch: bool = True) -> str:
    """The local folder to open the shard of catalog row ``row`` from: in the home, or
    for a mounted home the local cache's copy (fetched and checked against the row's
    checksum unless ``fetch`` is False)."""
    path = os.path.join(os.fspath(home), row["path"])
    m = mounted(path)
    if m is None:
        return path
    checksum = row.get("checksum")
    if not checksum:
        raise StoreError(f"shard {row['path']} of an object-store home has no checksum "
                         "recorded; it cannot be fetched")
    if not fetch:
        return str(m.shards.folder(checksum))
    return str(m.shards.fetch(m.store, m.key(path), checksum))


def sweep_attempts(home: str | os.PathLike, rid: str, keep: Iterable[str]) -> int:
    """Delete the shard objects of run ``rid`` that no catalog row names (``keep``: the
    rows' paths relative to the home): attempts that lost, and attempts of a run that
    failed. Returns how many objects went."""
    m = mounted(home)
    if m is None:
        return 0
    wanted = {p.strip("/") + "/" for p in keep}
    base = f"{m.key(Path(home) / 'runs' / rid)}/lineage/"
    gone = [k for k in m.store.list(base) if not _prefixes(k, wanted)]
    m.store.delete_many(gone)
    return len(gone)


def _prefixes(key: str, wanted: set[str]) -> list[str]:
    """The attempt folder ``key`` is in, if the catalog names it (``.../a<n>-<id>/``)."""
    head = key.rsplit("/", 1)[0] + "/"
    return [head] if head in wanted else []


def remove_tree(path: str | os.PathLike) -> int:
    """Delete every object under ``path`` of a mounted home (a run's folder) and the
    local copy; the bytes the objects took."""
    m = mounted(path)
    assert m is not None
    key = m.key(path).strip("/") + "/"
    sizes = m.store.sizes(key)
    m.store.delete_many(list(sizes))
    shutil.rmtree(path, ignore_errors=True)
    return sum(sizes.values())


#: the variables an executor reaches an object store with (:func:`executor_env`)
AWS_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
                 "AWS_ENDPOINT_URL_S3", "AWS_ALLOW_HTTP")


def executor_env() -> dict[str, str]:
    """The Spark conf that gives executors the driver's AWS variables
    (``spark.executorEnv.*``), for a cluster whose nodes have no credentials of their own;
    nodes with an instance role need none of it, and a variable not set here is not
    sent."""
    return {f"spark.executorEnv.{k}": os.environ[k] for k in AWS_VARIABLES
            if os.environ.get(k)}


def tree_bytes(path: str | os.PathLike) -> int:
    """Bytes of the objects under ``path`` of a mounted home (what removing it frees)."""
    m = mounted(path)
    assert m is not None
    return sum(m.store.sizes(m.key(path).strip("/") + "/").values())


def run_names(home: str | os.PathLike) -> list[str]:
    """The run folders (``runs/<name>/``) that hold objects in a mounted home."""
    m = mounted(home)
    assert m is not None
    base = f"{m.key(Path(home) / 'runs')}/"
    return sorted({k[len(base):].split("/", 1)[0] for k in m.store.list(base)})
