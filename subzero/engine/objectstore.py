"""A home's datastore in S3-compatible object storage: objects, chunk files and shards.

The module holds:

- :class:`ObjectStore`: one bucket and key prefix (``s3://bucket/prefix``) reached with
  the usual AWS variables, a small synchronous API over :mod:`obstore` (get, ranged get,
  put, files up and down, list, delete), every request counted in :class:`TransferStats`,
  and :meth:`ObjectStore.check`, which says in one line what is wrong with the URL, the
  endpoint or the credentials;
- :class:`S3ChunkStore`: the chunk files of one array as objects, keyed as
  :func:`~subzero.engine.chunkstore.chunk_file` names them, so that the objects mirror the
  local layout (``<name>.zarr/c/1/0``), for :class:`~subzero.engine.chunkstore.ChunkFiles`
  to read and write (:func:`open_files`);
- lineage shards in object storage: :func:`upload_shard` stores a published shard folder
  as immutable objects, :class:`ShardCache` brings one back into a local folder, checked
  against its checksum and published by a rename, for LMDB to open read-only.

A single PUT is atomic in S3: a reader sees the old object or the new one, never part of
either, so a chunk write is one PUT of the whole chunk and needs no temporary name. A
shard is several objects; its checksum (:func:`encoders.store.shard_checksum`) names
every file, so a reader knows what to fetch and finds a missing or damaged one.

:mod:`obstore` is imported here only, and only once a store is used: importing
:mod:`subzero.engine` never needs it.

Configuration comes from the environment, as the AWS tools read it:

=============================  ============================================================
variable                       meaning
=============================  ============================================================
``AWS_ACCESS_KEY_ID``          the access key (with ``AWS_SECRET_ACCESS_KEY``)
``AWS_SESSION_TOKEN``          a temporary credential's token
``AWS_REGION``                 the region (else ``AWS_DEFAULT_REGION``, else us-east-1)
``AWS_ENDPOINT_URL_S3``        the endpoint (else ``AWS_ENDPOINT_URL``, else AWS's own)
``AWS_ALLOW_HTTP``             ``true``: an ``http://`` endpoint is allowed
=============================  ============================================================

Requests time out and are retried a few times only (:data:`CONNECT_TIMEOUT_S`,
:data:`RETRIES`), so that a wrong endpoint is reported at once rather than after minutes
of retries.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from encoders.store import check_shard_files, shard_checksum
from subzero import settings
from subzero.engine.chunkstore import ChunkFiles, ChunkStore, Key, chunk_file
from subzero.engine.codec import blosc_blocks, blosc_sizes
from subzero.errors import DamagedError, StoreError

__all__ = ["ObjectStore", "TransferStats", "S3ChunkStore", "open_files", "upload_shard",
           "ShardCache", "parse_url", "parse_digest"]

#: seconds a connection to the endpoint may take to open
CONNECT_TIMEOUT_S = settings.define(
    "S3_CONNECT_TIMEOUT", 2.0, float,
    "Seconds a connection to the object store's endpoint may take to open before the "
    "request fails (a failed request is retried: see S3_RETRIES).", module=__name__)
#: retries of a failed request (a connection error, a timeout, a 5xx answer)
RETRIES = settings.define(
    "S3_RETRIES", 3, int,
    "Times a request to the object store is retried after a connection error, a timeout "
    "or a server error, with exponential backoff.", module=__name__)
#: seconds without a byte from the server before a request fails
READ_TIMEOUT_S = settings.define(
    "S3_READ_TIMEOUT", 30.0, float,
    "Seconds a request to the object store may wait for the server's next bytes.",
    module=__name__)
#: files larger than this go up in parts of this size (S3's smallest part is 5 MiB)
PART_BYTES = 8 << 20
#: bytes of a chunk's frame a ranged read asks for first: its header and the offsets of up
#: to 1,020 blocks (:meth:`S3ChunkStore.frame_part`)
FRAME_HEAD = 16 + 4 * 1020
#: keys a LIST request answers at most (S3's page)
LIST_PAGE = 1000
#: the overall time :meth:`ObjectStore.check` allows a request, retries included
CHECK_TIMEOUT_S = 4.0

_TRUE = {"1", "true", "yes", "on"}


# -- input ----------------------------------------------------------------------------------
def parse_url(url: str) -> tuple[str, str]:
    """The bucket and key prefix of an object store URL ``s3://bucket/prefix``.

    Raises
    ------
    StoreError
        The URL is not ``s3://`` with a bucket.

    Examples
    --------
    >>> parse_url("s3://lab-data/homes/alice/")
    ('lab-data', 'homes/alice')
    >>> parse_url("s3://lab-data")
    ('lab-data', '')
    """
    got = urlparse(url)
    bucket = got.netloc
    if got.scheme != "s3" or not bucket or got.query or got.fragment:
        raise StoreError(f"an object store home is s3://bucket/prefix; got {url!r} instead.")
    if not re.fullmatch(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]", bucket):
        raise StoreError(f"{bucket!r} is not an S3 bucket name (3 to 63 lower-case letters, "
                         f"digits, dots and hyphens) in {url!r}")
    return bucket, got.path.strip("/")


def parse_digest(digest: str) -> dict[str, str]:
    """The files of a shard by name, each with its CRC-32 in hex, from the shard's checksum
    (:func:`encoders.store.shard_checksum`: ``crc32:NAME=HEX,...``).

    Raises
    ------
    StoreError
        ``digest`` is not such a checksum, or names a file outside the shard's folder.

    Examples
    --------
    >>> parse_digest("crc32:data.mdb=0a1b2c3d,meta.json=00000001")
    {'data.mdb': '0a1b2c3d', 'meta.json': '00000001'}
    """
    body = digest.removeprefix("crc32:") if isinstance(digest, str) else ""
    files: dict[str, str] = {}
    for kv in body.split(",") if body else []:
        name, _, crc = kv.partition("=")
        if (not re.fullmatch(r"[0-9a-f]{8}", crc) or not name or "/" in name
                or name.startswith(".")):
            files = {}
            break
        files[name] = crc
    if not digest.startswith("crc32:") or not files:
        raise StoreError(f"a shard checksum is crc32:NAME=HEX,...; got {digest!r} instead.")
    return files


@dataclass(frozen=True)
class _Settings:
    """Where the store is and how to sign requests, read from the environment."""

    endpoint: str | None
    region: str
    key_id: str | None
    secret: str | None = field(repr=False)
    token: str | None = field(repr=False)
    allow_http: bool

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "_Settings":
        def get(*names: str) -> str | None:
            for n in names:
                if env.get(n):
                    return env[n]
            return None

        return cls(endpoint=get("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
                   region=get("AWS_REGION", "AWS_DEFAULT_REGION") or "us-east-1",
                   key_id=get("AWS_ACCESS_KEY_ID"), secret=get("AWS_SECRET_ACCESS_KEY"),
                   token=get("AWS_SESSION_TOKEN"),
                   allow_http=(get("AWS_ALLOW_HTTP") or "").strip().lower() in _TRUE)

    def where(self) -> str:
        """The endpoint, as the messages name it."""
        return self.endpoint or f"https://s3.{self.region}.amazonaws.com"

    def key_hint(self) -> str:
        """The access key's first characters (never the secret), for messages."""
        if not self.key_id:
            return "no AWS_ACCESS_KEY_ID set"
        return f"access key {self.key_id[:4]}..."


# -- statistics -----------------------------------------------------------------------------
class TransferStats:
    """Requests by kind and bytes moved by one :class:`ObjectStore`, safe for threads.

    Kinds are the HTTP requests made: ``GET`` (a whole object, or a file down), ``RANGE``
    (a ranged GET), ``HEAD``, ``PUT`` (an object, or a part of a file going up in parts),
    ``POST`` (starting and completing such an upload), ``LIST`` (a page of keys) and
    ``DELETE`` (one key, or a batch of them).

    Examples
    --------
    >>> s = TransferStats(); s.add("GET", down=10); s.add("PUT", up=3); s.add("GET", down=2)
    >>> s.snapshot()
    {'requests': {'GET': 2, 'PUT': 1}, 'bytes_up': 3, 'bytes_down': 12}
    >>> s.requests, s.reset(), s.requests
    (3, None, 0)
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[str, int] = {}
        self.bytes_up = 0
        self.bytes_down = 0

    def add(self, kind: str, n: int = 1, up: int = 0, down: int = 0) -> None:
        """Count ``n`` requests of ``kind`` moving ``up`` and ``down`` bytes."""
        with self._lock:
            self._requests[kind] = self._requests.get(kind, 0) + n
            self.bytes_up += up
            self.bytes_down += down

    @property
    def requests(self) -> int:
        """Requests of every kind."""
        with self._lock:
            return sum(self._requests.values())

    def snapshot(self) -> dict[str, Any]:
        """``{"requests": {kind: n}, "bytes_up": n, "bytes_down": n}`` now."""
        with self._lock:
            return {"requests": dict(sorted(self._requests.items())),
                    "bytes_up": self.bytes_up, "bytes_down": self.bytes_down}

    def reset(self) -> None:
        """Start counting from zero."""
        with self._lock:
            self._requests.clear()
            self.bytes_up = self.bytes_down = 0


# -- errors ---------------------------------------------------------------------------------
def _status(text: str) -> tuple[int | None, str | None]:
    """The HTTP status and S3 error code in an obstore error's text (None: not there)."""
    m = re.search(r"status code: (\d{3})", text)
    c = re.search(r"<Code>([^<]+)</Code>", text)
    return (int(m.group(1)) if m else None), (c.group(1) if c else None)


#: S3 error codes meaning the credentials are wrong, expired or not allowed
_AUTH_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied",
               "InvalidClientTokenId", "ExpiredToken", "InvalidToken", "TokenRefreshRequired",
               "AuthorizationHeaderMalformed", "UnrecognizedClientException"}


class ObjectStore:
    """The objects under one key prefix of one S3 bucket (``s3://bucket/prefix``).

    Keys are relative to the prefix, ``/``-separated. Credentials, region and endpoint
    come from the AWS variables (the module's documentation lists them). The client is
    made at the first request, so a store can be made, and pickled, anywhere.

    Parameters
    ----------
    url
        ``s3://bucket/prefix``.
    env
        The variables to read (None: this process's environment). obstore may still
        read a variable not given here (``AWS_CONTAINER_CREDENTIALS_*``, a web identity
        token) from the process's environment.

    Attributes
    ----------
    url : str
        The URL, as given.
    bucket, prefix : str
        Its bucket, and its prefix without slashes at either end.
    stats : TransferStats
        The requests made and bytes moved so far.

    Raises
    ------
    StoreError
        The URL is not ``s3://bucket/prefix``, or names a plain ``http://`` endpoint
        without ``AWS_ALLOW_HTTP``.

    Examples
    --------
    >>> store = ObjectStore("s3://lab-data/homes/alice", env={"AWS_REGION": "eu-west-1"})
    >>> store.bucket, store.prefix, store.endpoint
    ('lab-data', 'homes/alice', 'https://s3.eu-west-1.amazonaws.com')
    """

    def __init__(self, url: str, env: Mapping[str, str] | None = None) -> None:
        self.url = url
        self.bucket, self.prefix = parse_url(url)
        self._env = None if env is None else dict(env)
        self._cfg = _Settings.from_env(os.environ if env is None else env)
        if (self._cfg.endpoint or "").lower().startswith("http://") and not self._cfg.allow_http:
            raise StoreError(f"the object store endpoint {self._cfg.endpoint} for {url} is "
                             f"plain http; set AWS_ALLOW_HTTP=true to use it")
        self.stats = TransferStats()
        self._client: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ObjectStore({self.url!r}, endpoint={self.endpoint!r})"

    def __getstate__(self) -> dict[str, Any]:
        # the client (sockets, a runtime) is made again where the store is unpickled
        return {"url": self.url, "env": self._env}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], state["env"])  # type: ignore[misc]

    @property
    def endpoint(self) -> str:
        """The endpoint requests go to."""
        return self._cfg.where()

    # -- the client ------------------------------------------------------------------------
    def _make(self, timeout: float | None, retries: int, retry_s: float,
              prefix: str | None = None) -> Any:
        from obstore.store import S3Store  # only once a store is used (see the module)

        cfg = self._cfg
        config: dict[str, Any] = {"region": cfg.region}
        if cfg.endpoint:
            config["endpoint"] = cfg.endpoint
        if cfg.key_id:
            config["access_key_id"] = cfg.key_id
        if cfg.secret:
            config["secret_access_key"] = cfg.secret
        if cfg.token:
            config["session_token"] = cfg.token
        client: dict[str, Any] = {"allow_http": cfg.allow_http,
                                  "connect_timeout": timedelta(seconds=CONNECT_TIMEOUT_S),
                                  "read_timeout": timedelta(seconds=READ_TIMEOUT_S)}
        if timeout is not None:
            client["timeout"] = timedelta(seconds=timeout)
        retry = {"max_retries": retries, "retry_timeout": timedelta(seconds=retry_s),
                 "backoff": {"init_backoff": timedelta(milliseconds=100),
                             "max_backoff": timedelta(seconds=2), "base": 2}}
        try:
            return S3Store(self.bucket, prefix=(prefix if prefix is not None else self.prefix)
                           or None, config=config,
                           client_options=client, retry_config=retry)
        except Exception as e:  # obstore's configuration errors
            raise StoreError(f"cannot use the object store {self.url} at {self.endpoint}: "
                             f"{_first_line(e)}") from None

    @property
    def client(self) -> Any:
        """The :class:`obstore.store.S3Store`, made at first use."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._make(None, RETRIES, 30.0)
        return self._client

    def client_at(self, key: str) -> Any:
        """An :class:`obstore.store.S3Store` whose keys are relative to ``key`` (a folder
        of this store): what zarr's own :class:`zarr.storage.ObjectStore` is given for
        one array."""
        inner = self._key(key.strip("/"))
        return self._make(None, RETRIES, 30.0,
                          prefix=f"{self.prefix}/{inner}" if self.prefix else inner)

    def _error(self, e: BaseException, what: str) -> BaseException:
        """The error to raise for obstore's ``e`` while doing ``what``: FileNotFoundError
        as it is, an error of the endpoint, bucket or credentials as one line.

        The requests catch any ``Exception`` and come here: obstore's errors carry the
        request, the server's answer and a Rust debug dump over many lines, and none of
        them should reach a user as it is."""
        if isinstance(e, FileNotFoundError):
            return e
        text = str(e)
        status, code = _status(text)
        cfg = self._cfg
        if code == "NoSuchBucket" or (status == 404 and "list" in what.lower()):
            return StoreError(f"bucket {self.bucket!r} does not exist at {self.endpoint} "
                              f"({self.url}); expected an existing bucket")
        if status in (401, 403) or code in _AUTH_CODES:
            return StoreError(
                f"the object store at {self.endpoint} refused the credentials for {self.url} "
                f"({code or status}, {cfg.key_hint()}); expected AWS_ACCESS_KEY_ID and "
                f"AWS_SECRET_ACCESS_KEY allowed to use bucket {self.bucket!r}")
        if status is None and re.search(r"error sending request|[Cc]onnect|dns error|timed? ?out|"
                                        r"[Tt]imeout|connection", text):
            return StoreError(f"cannot reach the object store at {self.endpoint} for "
                              f"{self.url} ({what}: no connection); expected an S3 API "
                              f"there (check AWS_ENDPOINT_URL)")
        detail = f"HTTP {status}" + (f" {code}" if code else "") if status else _first_line(e)
        return StoreError(f"object store {self.url} at {self.endpoint}: {what} failed: "
                          f"{detail}")

    def _key(self, key: str) -> str:
        if not isinstance(key, str) or not key or key.startswith("/") or "//" in key:
            raise StoreError(f"an object key is a relative path a/b/c; got {key!r} instead.")
        return key

    # -- requests --------------------------------------------------------------------------
    def check(self) -> None:
        """Make sure the bucket answers with these credentials: one LIST request, which
        fails within seconds (a short timeout, one retry).

        Raises
        ------
        StoreError
            The endpoint is unreachable, the credentials are refused or the bucket does
            not exist, in one line naming the URL and the endpoint.
        """
        import obstore

        fast = self._make(CHECK_TIMEOUT_S, 1, CHECK_TIMEOUT_S)
        try:
            obstore.list_with_delimiter(fast, prefix=None)
        except Exception as e:
            raise self._error(e, "LIST") from None
        finally:
            self.stats.add("LIST")

    def get(self, key: str) -> bytes:
        """Object ``key``.

        Raises
        ------
        FileNotFoundError
            No such object.
        StoreError
            The request failed (one line).
        """
        import obstore

        try:
            data = bytes(obstore.get(self.client, self._key(key)).bytes())
        except Exception as e:
            self.stats.add("GET")
            raise self._error(e, f"GET {key}") from None
        self.stats.add("GET", down=len(data))
        return data

    def get_range(self, key: str, start: int, stop: int) -> bytes:
        """Bytes ``start`` to ``stop`` of object ``key`` (fewer where it ends).

        Raises
        ------
        FileNotFoundError
            No such object.
        StoreError
            The request failed (one line).
        """
        import obstore

        start, stop = max(0, int(start)), int(stop)
        if stop <= start:
            self.exists(key, missing_raises=True)
            return b""
        try:
            data = bytes(obstore.get_range(self.client, self._key(key), start=start, end=stop))
        except Exception as e:
            self.stats.add("RANGE")
            if _status(str(e))[0] == 416:  # the range starts at or past the object's end
                return b""
            raise self._error(e, f"GET {key} bytes {start}-{stop}") from None
        self.stats.add("RANGE", down=len(data))
        return data

    def put(self, key: str, data: Any) -> None:
        """Store ``data`` (bytes or a buffer) as object ``key`` in one PUT, which is atomic:
        a reader sees the old object or this one.

        Raises
        ------
        StoreError
            The request failed (one line); the object is as it was.
        """
        import obstore

        n = memoryview(data).nbytes
        try:
            obstore.put(self.client, self._key(key), data, use_multipart=False)
        except Exception as e:
            self.stats.add("PUT")
            raise self._error(e, f"PUT {key}") from None
        self.stats.add("PUT", up=n)

    def put_file(self, key: str, path: str | os.PathLike) -> int:
        """Store local file ``path`` as object ``key``, in parts when it is large (the object
        appears whole once the upload completes). Returns its size.

        Raises
        ------
        FileNotFoundError
            No such local file.
        StoreError
            The request failed (one line).
        """
        import obstore

        path = Path(path)
        n = path.stat().st_size
        parts = -(-n // PART_BYTES)
        multi = parts > 1
        try:
            obstore.put(self.client, self._key(key), path, use_multipart=multi,
                        chunk_size=PART_BYTES)
        except Exception as e:
            self.stats.add("PUT")
            raise self._error(e, f"PUT {key}") from None
        if multi:
            self.stats.add("POST", 2)
        self.stats.add("PUT", parts if multi else 1, up=n)
        return n

    def get_file(self, key: str, path: str | os.PathLike) -> int:
        """Write object ``key`` to local file ``path``, streamed to a temporary file in the
        same folder and renamed into place once whole. Returns its size.

        Raises
        ------
        FileNotFoundError
            No such object (``path`` is left as it was).
        StoreError
            The request failed (one line).
        """
        import obstore

        path = Path(path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
        n = 0
        try:
            got = obstore.get(self.client, self._key(key))
            with open(tmp, "wb") as out:
                for buf in got:
                    out.write(buf)
                    n += len(buf)
            os.replace(tmp, path)
        except OSError:  # the object is missing (obstore's NotFound), or the local disk
            tmp.unlink(missing_ok=True)
            self.stats.add("GET", down=n)
            raise
        except Exception as e:
            tmp.unlink(missing_ok=True)
            self.stats.add("GET", down=n)
            raise self._error(e, f"GET {key}") from None
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self.stats.add("GET", down=n)
        return n

    def list(self, prefix: str = "") -> list[str]:
        """The keys under ``prefix`` (a folder: ``a/b`` lists ``a/b/...``, not ``a/bc``),
        relative to the store's prefix, sorted.

        Raises
        ------
        StoreError
            The request failed (one line).
        """
        return sorted(self.sizes(prefix))

    def sizes(self, prefix: str = "") -> dict[str, int]:
        """The keys under ``prefix`` (as :meth:`list` finds them) with their sizes in
        bytes.

        Raises
        ------
        StoreError
            The request failed (one line).
        """
        import obstore

        out: dict[str, int] = {}
        try:
            for batch in obstore.list(self.client, prefix=prefix.strip("/") or None,
                                      chunk_size=LIST_PAGE):
                out.update((m["path"], int(m["size"])) for m in batch)
        except Exception as e:
            raise self._error(e, f"LIST {prefix}") from None
        finally:
            self.stats.add("LIST", max(1, -(-len(out) // LIST_PAGE)))
        return out

    def delete_many(self, keys: Sequence[str]) -> None:
        """Remove objects ``keys`` (those that exist), in batches of S3's bulk delete.

        Raises
        ------
        StoreError
            A request failed (one line).
        """
        import obstore

        keys = list(keys)
        for i in range(0, len(keys), LIST_PAGE):
            batch = [self._key(k) for k in keys[i:i + LIST_PAGE]]
            try:
                obstore.delete(self.client, batch)
            except Exception as e:
                raise self._error(e, f"DELETE {batch[0]}...") from None
            finally:
                self.stats.add("DELETE")

    def delete(self, key: str) -> None:
        """Remove object ``key`` (nothing when there is none).

        Raises
        ------
        StoreError
            The request failed (one line).
        """
        import obstore

        try:
            obstore.delete(self.client, self._key(key))
        except FileNotFoundError:
            pass
        except Exception as e:
            raise self._error(e, f"DELETE {key}") from None
        finally:
            self.stats.add("DELETE")

    def delete_prefix(self, prefix: str) -> int:
        """Remove every object under ``prefix`` (as :meth:`list` finds them), in batches.
        Returns how many.

        Raises
        ------
        StoreError
            ``prefix`` is empty (the whole store: refused), or a request failed.
        """

        if not prefix.strip("/"):
            raise StoreError(f"delete_prefix needs a prefix inside {self.url}; got "
                             f"{prefix!r} instead.")
        keys = self.list(prefix)
        self.delete_many(keys)
        return len(keys)

    def exists(self, key: str, missing_raises: bool = False) -> bool:
        """Whether object ``key`` exists (one HEAD request).

        Parameters
        ----------
        key
            The object.
        missing_raises
            Raise FileNotFoundError rather than answer False.
        """
        import obstore

        try:
            obstore.head(self.client, self._key(key))
            return True
        except FileNotFoundError:
            if missing_raises:
                raise
            return False
        except Exception as e:
            raise self._error(e, f"HEAD {key}") from None
        finally:
            self.stats.add("HEAD")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


# -- chunk files ----------------------------------------------------------------------------
class S3ChunkStore(ChunkStore):
    """The chunk files of one array as objects of an :class:`ObjectStore`.

    Chunk ``key`` is the object :func:`~subzero.engine.chunkstore.chunk_file` names under
    ``root`` (``a.zarr/c/1/0``), so the objects mirror the local layout. A write is one
    PUT of the whole chunk, atomic as a local write's rename is; nothing temporary is
    ever stored.

    Parameters
    ----------
    store
        The object store.
    root
        The array's folder relative to the store (``<name>.zarr``, or deeper).

    Examples
    --------
    >>> S3ChunkStore(ObjectStore("s3://lab-data/h", env={}), "runs/r1/a.zarr").name((1, 0))
    'runs/r1/a.zarr/c/1/0'
    """

    def __init__(self, store: ObjectStore, root: str | os.PathLike) -> None:
        self.store = store
        self.root = Path(root).as_posix().strip("/")

    def name(self, key: Key) -> str:
        """The object key of chunk ``key``."""
        return chunk_file(Path(self.root), key).as_posix()

    def read(self, key: Key) -> bytes:
        return self.store.get(self.name(key))

    def read_range(self, key: Key, start: int, stop: int) -> bytes:
        return self.store.get_range(self.name(key), start, stop)

    def write(self, key: Key, parts: Sequence[Any]) -> None:
        self.store.put(self.name(key), b"".join(parts))

    def frame_part(self, key: Key, crc: bool, span: tuple[int, int], itemsize: int) -> Any:
        """Ranged reads: the frame's header and block offsets, then the bytes of the
        blocks holding ``span`` in one ranged GET, laid into a frame of the chunk's
        length; the whole chunk (checked) when those blocks are half of it or more, or the
        frame has no blocks of its own. An object is written whole by one PUT and never
        changed, so what a ranged read returns is what was uploaded; the chunk's checksum
        covering the whole file is checked when a chunk is read whole."""
        name = self.name(key)
        head = self.store.get_range(name, 0, FRAME_HEAD)
        nbytes, bsize, cbytes = blosc_sizes(head)
        if nbytes <= 0 or bsize <= 0 or bsize % itemsize or cbytes < 16:
            return self.frame(key, crc)
        index = 16 + 4 * -(-nbytes // bsize)
        if index > len(head) and index <= cbytes:
            head += self.store.get_range(name, len(head), index)
        frame = bytearray(cbytes)
        frame[:min(index, len(head), cbytes)] = head[:min(index, cbytes)]
        got = blosc_blocks(frame, itemsize)
        if got is None:  # stored raw, or a header that does not hold together
            return self.frame(key, crc)
        _, starts, ends = got
        per = bsize // itemsize
        b0, b1 = span[0] // per, (max(span[1], span[0] + 1) - 1) // per + 1
        lo, hi = int(starts[b0:b1].min()), int(ends[b0:b1].max())
        if 2 * (hi - lo) >= cbytes:
            return self.frame(key, crc)
        frame[lo:hi] = self.store.get_range(name, lo, hi)
        return memoryview(frame)

    def list_keys(self) -> list[Key]:
        base = f"{self.root}/c"
        out: list[Key] = []
        for k in self.store.list(base):
            rel = k[len(base) + 1:].split("/")
            if all(p.isdigit() for p in rel):
                out.append(tuple(int(p) for p in rel))
        if not out and self.store.exists(base):  # a 0-d array's one chunk is ``c`` itself
            return [()]
        return sorted(out)

    def delete(self, key: Key) -> None:
        self.store.delete(self.name(key))


def open_files(store: ObjectStore, root: str | os.PathLike) -> ChunkFiles | None:
    """The array whose folder is ``root`` in ``store`` as
    :class:`~subzero.engine.chunkstore.ChunkFiles` over an :class:`S3ChunkStore` (its
    ``zarr.json`` read from the store), or None where that class does not read it.

    Raises
    ------
    FileNotFoundError
        No ``zarr.json`` there.
    """
    root = Path(root).as_posix().strip("/")
    text = store.get(f"{root}/zarr.json")
    return ChunkFiles.open(Path(root), store=S3ChunkStore(store, root), text=text)


# -- lineage shards -------------------------------------------------------------------------
def upload_shard(store: ObjectStore, local_dir: str | os.PathLike, key_prefix: str
                 ) -> dict[str, Any]:
    """Store every file of the published shard at ``local_dir`` as objects under
    ``key_prefix``, ``meta.json`` last.

    The objects are never written again: the caller makes ``key_prefix`` unique to the
    task attempt (``runs/r1/lineage/op/strategy/0.1/a<attempt>/``), so a retried task
    writes beside, not over, an earlier attempt's objects.

    Parameters
    ----------
    store
        The object store.
    local_dir
        The shard's folder.
    key_prefix
        Where its objects go (a folder: ``/`` is added).

    Returns
    -------
    dict
        ``prefix`` (with its ``/``), ``files`` (name: size), ``keys``, ``bytes`` and
        ``checksum``: the shard's checksum as the catalog records it
        (:func:`encoders.store.shard_checksum`), which :meth:`ShardCache.fetch` takes.
    """
    local = Path(local_dir)
    digest = shard_checksum(local)
    prefix = key_prefix.strip("/") + "/"
    names = sorted(parse_digest(digest), key=lambda n: (n == "meta.json", n))
    files = {n: store.put_file(prefix + n, local / n) for n in names}
    return {"prefix": prefix, "files": files, "keys": [prefix + n for n in names],
            "bytes": sum(files.values()), "checksum": digest}


class ShardCache:
    """Shards fetched from object storage into local folders, for LMDB to open read-only.

    Shard ``digest`` (its checksum) lives in ``root/<h>``, ``h`` a hash of the digest
    (:meth:`folder`): the same digest is the same files, wherever they were fetched from.
    A fetch downloads into a temporary folder beside it (``.tmp.<h>.<pid>.<id>``), checks
    every file against the digest and renames the folder into place: a reader sees a
    whole, checked shard or none. Threads of one process fetching the same shard wait for
    the first; processes race, and the rename's loser drops its copy.

    Parameters
    ----------
    root
        The cache's folder (made when needed).

    Examples
    --------
    >>> ShardCache("/tmp/c").folder("crc32:data.mdb=0a1b2c3d,meta.json=00000001").name
    'a85f2964ee9ed65cd2934b0f04d6b603'
    """

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self._locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    def folder(self, digest: str) -> Path:
        """The folder shard ``digest`` is kept in."""
        parse_digest(digest)
        return self.root / hashlib.blake2b(digest.encode(), digest_size=16).hexdigest()

    def fetch(self, store: ObjectStore, key_prefix: str, digest: str) -> Path:
        """The local folder of the shard stored under ``key_prefix`` with checksum
        ``digest``, downloaded unless the cache holds it.

        Raises
        ------
        DamagedError
            An object is missing or does not match ``digest`` (one line); nothing of it
            is left in the cache.
        StoreError
            A request failed.
        """
        dest = self.folder(digest)
        if dest.is_dir():
            return dest
        with self._locks_lock:
            lock = self._locks.setdefault(digest, threading.Lock())
        with lock:
            if not dest.is_dir():
                self._download(store, key_prefix.strip("/") + "/", digest, dest)
        return dest

    def _download(self, store: ObjectStore, prefix: str, digest: str, dest: Path) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".tmp.{dest.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        where = f"{store.url.rstrip('/')}/{prefix}"
        try:
            for name in parse_digest(digest):
                try:
                    store.get_file(prefix + name, tmp / name)
                except FileNotFoundError:
                    raise DamagedError(f"lineage shard {where} is damaged: file {name} "
                                       f"missing; run 'subzero verify' on this run") from None
            problem = check_shard_files(tmp, digest)
            if problem is not None:
                raise DamagedError(f"lineage shard {where} is damaged: {problem}; run "
                                   f"'subzero verify' on this run")
            try:
                os.rename(tmp, dest)
            except OSError:
                if not dest.is_dir():
                    raise
                # another process published the same shard first: keep its copy
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def remove_leftovers(self) -> int:
        """Remove the temporary folders of fetches that died: call only once no fetch can
        still be running here. Returns how many."""
        gone = 0
        for p in self.root.glob(".tmp.*"):
            shutil.rmtree(p, ignore_errors=True)
            gone += 1
        return gone

    def __iter__(self) -> Iterator[Path]:
        """The shards' folders in the cache."""
        return iter(sorted(p for p in self.root.glob("[!.]*") if p.is_dir()))
