"""Shipping the driver's Python environment to Spark executors that share no files with it.

A cloud or campus cluster's executors have Spark (its JVM, its own pyspark sources) but not
our virtualenv. As PySpark's packaging guide recommends, the running virtualenv is packed
with venv-pack into a ``.tar.gz`` and submitted as ``spark.archives=<archive>#environment``:
each executor unpacks it into its working directory as ``environment/`` and starts its
Python workers with ``./environment/bin/python``, while the driver keeps its own interpreter.

Three things differ from a plain ``venv-pack``:

* The project is installed editable (``pip install -e``): site-packages holds a ``.pth`` and
  an import finder that point at the driver's checkout, which executors do not have (and
  venv-pack 0.2 packs them without a word: it only refuses the older path-line ``.pth``).
  The archive leaves them out and carries the project's packages (:data:`PROJECT_PACKAGES`,
  with their package data) in its site-packages instead.
* pyspark's ``jars/`` folder, most of the environment's size, is left out: the executors'
  JVM is the cluster's, and the Python workers only import pyspark's Python code.
* The archive is cached by content: its name carries a digest of what is installed (every
  distribution's ``RECORD``, the ``.pth`` files, ``pyvenv.cfg``) and of the project's own
  files, so an unchanged environment is packed once; it is written under a temporary name
  and renamed, so a killed pack never leaves a half archive under the final name.

What the executors' machines need: a venv's ``bin/python`` is a symbolic link to the base
interpreter that made it (``pyvenv.cfg``'s ``home``), so that interpreter, same version, must
exist at the same path on every worker (:func:`check_environment` says which, and how to
check). Executors' Python workers get ``PYTHONPATH`` empty but for Spark's own zips: the
workflow modules that come from no installed distribution (a user's ``pipeline.py``) reach
them through ``SparkContext.addPyFile`` (:func:`subzero.engine.spark.ship_user_code`).

Spark unpacks ``spark.archives`` on the driver too, before the application registers with
the master (:data:`subzero.engine.spark.ARCHIVES_WAIT_S` gives that time), and on each
executor before its first task: both need room for the unpacked environment. Editing a
project file makes a new archive at the next pack.

Use (a cluster master; a local master's workers run the driver's own Python)::

    archive = packed_environment(default_cache_dir(), notify=print)
    spark = get_spark("spark://head:7077", conf=ship_conf(archive, "spark://head:7077"))
    probe_executors(spark)     # [{'python': '.../environment/bin/python', ...}]
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

from subzero.engine.spark import CACHE_ENV
from subzero.errors import ShipEnvError

#: the project's top-level packages, carried in the archive's site-packages
PROJECT_PACKAGES = ("subzero", "operators", "encoders", "optimizer", "workflows")
#: the folder the executors unpack the archive into (``spark.archives``'s ``#`` fragment)
ENV_DIR = "environment"
#: the executors' Python, relative to their working directory
EXECUTOR_PYTHON = f"./{ENV_DIR}/bin/python"
#: venv-pack patterns (relative to the venv) left out of the archive: pyspark's jars (the
#: cluster brings its own JVM side) and the editable install's hooks into the driver's checkout
EXCLUDE = (
    "lib/python*/site-packages/pyspark/jars/*",
    "lib/python*/site-packages/__editable__*",
    "lib/python*/site-packages/__pycache__/__editable__*",
)
#: part of every digest: a change to what goes into an archive makes new archives
RECIPE = "subzero-shipenv-1 " + " ".join(EXCLUDE)
PREFIX = "subzero-env-"
#: archives kept in the cache folder (the newest; the one in use is always kept)
KEEP = 3
#: gzip level: the archive is packed once per environment and unpacked on every executor
COMPRESS_LEVEL = 4


def default_cache_dir() -> Path:
    """Where archives are cached: ``$SUBZERO_CACHE/envs`` (default ``~/.cache/subzero/envs``),
    beside the driver JVM's class archive (:func:`subzero.engine.spark.class_archive_options`).

    Returns
    -------
    Path
        The folder (not made here).

    Examples
    --------
    >>> default_cache_dir().name
    'envs'
    """
    where = os.environ.get(CACHE_ENV) or str(Path.home() / ".cache" / "subzero")
    return Path(where) / "envs"


def venv_prefix(prefix: str | os.PathLike | None = None) -> Path:
    """The virtualenv to pack: ``prefix``, else the running one (``sys.prefix``).

    Parameters
    ----------
    prefix
        A venv's folder; None for the running interpreter's.

    Returns
    -------
    Path
        The venv's folder, resolved.

    Raises
    ------
    ShipEnvError
        ``prefix`` (or the running interpreter's) has no ``pyvenv.cfg``.

    Examples
    --------
    >>> venv_prefix("/usr")
    Traceback (most recent call last):
    ...
    subzero.errors.ShipEnvError: cannot ship the Python environment: /usr is not a virtualenv ...
    """
    if prefix is None:
        p = Path(sys.prefix)
        running = f" (sys.prefix of {sys.executable})"
    else:
        p, running = Path(prefix), ""
    if not (p / "pyvenv.cfg").is_file():
        raise ShipEnvError(
            f"cannot ship the Python environment: {p}{running} is not a virtualenv (expected "
            "a folder with pyvenv.cfg, e.g. run SubZero with .venv/bin/python of a "
            "'python -m venv .venv')")
    return p.resolve()


def _site_packages(prefix: Path) -> Path:
    """The venv's ``lib/pythonX.Y/site-packages`` (exactly one, as venv-pack requires)."""
    found = sorted(prefix.glob("lib/python*/site-packages"))
    if len(found) != 1:
        raise ShipEnvError(f"cannot ship the Python environment: {prefix} has "
                           f"{len(found)} lib/python*/site-packages folders, expected one")
    return found[0]


def _project_files(prefix: Path) -> list[tuple[Path, str]]:
    """The project's files to add to the archive, as ``(source, target)`` with targets
    relative to the venv: every file of each package of :data:`PROJECT_PACKAGES` (package
    data included; cached bytecode not) that lives outside the venv (an editable install's
    checkout; a regular install's copy is in site-packages already)."""
    target_root = _site_packages(prefix).relative_to(prefix)
    out = []
    for name in PROJECT_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise ShipEnvError(f"cannot ship the Python environment: package {name!r} "
                               "of the project is not importable here")
        folder = Path(next(iter(spec.submodule_search_locations))).resolve()
        if folder.is_relative_to(prefix):
            continue
        for f in _walk(folder):
            out.append((f, (target_root / name / f.relative_to(folder)).as_posix()))
    return out


def _walk(folder: Path) -> Iterator[Path]:
    """The files under ``folder``, sorted, without cached bytecode or editor backups."""
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if not f.endswith((".pyc", "~")):
                yield Path(root) / f


def environment_digest(prefix: Path, project: dict[str, bytes] | None = None) -> str:
    """A digest of what the archive of venv ``prefix`` holds.

    It covers the packing recipe (:data:`EXCLUDE`), ``pyvenv.cfg``, the names in
    site-packages, each distribution's ``RECORD`` (its files and their hashes;
    ``METADATA``/``PKG-INFO`` when it has none), each ``.pth`` file, and the content of
    every file of the project's packages. Reading the RECORDs rather than every installed
    file keeps it quick enough to run at every session start.

    Parameters
    ----------
    prefix
        The venv (resolved, as :func:`venv_prefix` returns it).
    project
        SHA-256 of each project file as packed, by its path in the archive; None to read
        the files now.

    Returns
    -------
    str
        A SHA-256, in hex.
    """
    if project is None:
        project = {t: hashlib.sha256(s.read_bytes()).digest() for s, t in _project_files(prefix)}
    h = hashlib.sha256(RECIPE.encode())
    h.update((prefix / "pyvenv.cfg").read_bytes())
    site = _site_packages(prefix)
    for entry in sorted(site.iterdir()):
        h.update(b"\0entry " + entry.name.encode())
        if entry.suffix in (".dist-info", ".egg-info") and entry.is_dir():
            for meta in ("RECORD", "installed-files.txt", "METADATA", "PKG-INFO"):
                if (entry / meta).is_file():
                    h.update((entry / meta).read_bytes())
                    break
        elif entry.suffix == ".pth":
            h.update(entry.read_bytes())
    for target, digest in sorted(project.items()):
        h.update(b"\0file " + target.encode() + b" " + digest)
    return h.hexdigest()


def packed_environment(cache_dir: str | os.PathLike, *,
                       notify: Callable[[str], None] | None = None,
                       prefix: str | os.PathLike | None = None) -> Path:
    """The archive of the running virtualenv (or of ``prefix``) for ``spark.archives``,
    packed into ``cache_dir`` unless an archive of the same content is there already.

    The archive is the venv as venv-pack packs it, less :data:`EXCLUDE`, plus the files of
    :data:`PROJECT_PACKAGES` that live outside the venv (an editable install's checkout;
    package data included, cached bytecode not) in its site-packages; its name carries
    :func:`environment_digest`. It is written under a temporary name in ``cache_dir`` and
    renamed into place; the newest :data:`KEEP` archives are kept, older ones removed.

    Parameters
    ----------
    cache_dir
        Folder of the cached archives (made if missing); :func:`default_cache_dir` suggests one.
    notify
        Hears one line before a pack starts (packing takes a while), none when the cached
        archive is used.
    prefix
        The venv to pack (default: the running interpreter's, ``sys.prefix``).

    Returns
    -------
    Path
        ``cache_dir/subzero-env-pyX.Y-<digest>.tar.gz``.

    Raises
    ------
    ShipEnvError
        Not a virtualenv, or one venv-pack cannot pack (one line).

    Examples
    --------
    >>> packed_environment("/tmp/envs", prefix="/usr")
    Traceback (most recent call last):
    ...
    subzero.errors.ShipEnvError: cannot ship the Python environment: /usr is not a virtualenv ...
    """
    venv = venv_prefix(prefix)
    cache = Path(cache_dir)
    cfg = _pyvenv(venv)
    version = cfg.get("version") or cfg.get("version_info") or ""
    tag = f"py{'.'.join(version.split('.')[:2])}-" if version else ""

    def name(digest: str) -> Path:
        return cache / f"{PREFIX}{tag}{digest[:20]}.tar.gz"

    final = name(environment_digest(venv))
    if final.is_file():
        return final
    cache.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(cache)
    if notify is not None:
        notify(f"packing the Python environment {venv} for the executors into {cache}...")
    temp = cache / f".{PREFIX}{os.getpid()}.tmp"
    try:
        packed = _pack(venv, temp)
        # named by the project files as packed: one edited meanwhile is in the next archive
        final = name(environment_digest(venv, packed))
        os.replace(temp, final)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _prune(cache, final)
    return final


def _pack(venv: Path, out: Path) -> dict[str, bytes]:
    """Write the archive of ``venv`` to ``out`` with venv-pack's own packer (its scripts,
    shebang rewriting and ``pyvenv.cfg``), writing into ``out`` itself: ``Env.pack`` would
    first write a temporary file in the system's temporary folder, where a killed pack
    leaves it behind. Returns the SHA-256 of each project file packed, by target."""
    from venv_pack.core import Env, Packer, VenvPackException, check_prefix
    from venv_pack.formats import archive

    try:
        env = Env(str(venv))
        for pattern in EXCLUDE:
            env = env.exclude(pattern)
        context = check_prefix(str(venv))
    except VenvPackException as e:
        reason = " ".join(str(e).split())
        raise ShipEnvError(f"cannot ship the Python environment {venv}: {reason}") from None
    packed = {}
    with open(out, "wb") as f, archive(f, "tar.gz", compress_level=COMPRESS_LEVEL) as arc:
        packer = Packer(context, arc, None)
        for file in env.files:
            packer.add(file)
        for source, target in _project_files(venv):
            data = source.read_bytes()  # read once: what is packed is what is hashed
            arc.add_bytes(str(source), data, target)
            packed[target] = hashlib.sha256(data).digest()
        packer.finish()
    return packed


def _remove_stale_temps(cache: Path) -> None:
    """Remove the temporary archives of packs whose process is gone (killed packs)."""
    for temp in cache.glob(f".{PREFIX}*.tmp"):
        pid = temp.name[len(PREFIX) + 1:-len(".tmp")]
        if not (pid.isdigit() and _alive(int(pid))):
            temp.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def _prune(cache: Path, keep: Path) -> None:
    """Remove all but the newest :data:`KEEP` archives of ``cache`` (``keep`` stays)."""
    archives = sorted(cache.glob(f"{PREFIX}*.tar.gz"), key=lambda p: p.stat().st_mtime_ns,
                      reverse=True)
    for old in archives[KEEP:]:
        if old != keep:
            old.unlink(missing_ok=True)


def _pyvenv(prefix: Path) -> dict[str, str]:
    """``pyvenv.cfg``'s ``key = value`` lines, keys lower-cased."""
    out = {}
    for line in (prefix / "pyvenv.cfg").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip().lower()] = value.strip()
    return out


def check_ship_master(master: str | None) -> None:
    """Refuse to ship the environment to a local master (one line): its Python workers
    run in the driver's working directory, where no ``environment/`` is unpacked.

    Raises
    ------
    ShipEnvError
        ``master`` is local.
    """
    if master is not None and master.strip().startswith("local"):
        raise ShipEnvError(f"shipping the Python environment needs a cluster master "
                           f"(spark://, yarn, k8s://), not {master!r}: local workers run "
                           "the driver's own Python")


def ship_conf(archive: str | os.PathLike, master: str | None = None) -> dict[str, str]:
    """The Spark conf that ships ``archive`` (from :func:`packed_environment`) to the
    executors; pass it to :func:`subzero.engine.spark.get_spark` (``conf=``) with a
    cluster master.

    ``spark.archives`` unpacks it as ``environment/`` in each executor's working directory;
    the executors' Python workers run ``./environment/bin/python`` (``spark.pyspark.python``,
    and ``PYSPARK_PYTHON`` in their environment); the driver keeps this interpreter
    (``spark.pyspark.driver.python``); the executors' ``PYTHONPATH`` is emptied, as paths of
    the driver's machine (its checkout, say) mean nothing there.

    Parameters
    ----------
    archive
        The ``.tar.gz`` to ship.
    master
        The session's master, when known: a local one is refused (its Python workers run
        in the driver's working directory, where no ``environment/`` is unpacked).

    Returns
    -------
    dict of str to str
        Spark properties.

    Raises
    ------
    ShipEnvError
        ``archive`` is missing, or its path holds ``,`` or ``#`` (Spark's separators), or
        ``master`` is local.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> a = pathlib.Path(tempfile.mkdtemp()) / "env.tar.gz"
    >>> _ = a.write_bytes(b"")
    >>> conf = ship_conf(a)
    >>> conf["spark.archives"].endswith("env.tar.gz#environment"), conf["spark.pyspark.python"]
    (True, './environment/bin/python')
    """
    check_ship_master(master)
    path = Path(archive).resolve()
    if not path.is_file():
        raise ShipEnvError(f"no environment archive at {path}")
    if "," in str(path) or "#" in str(path):
        raise ShipEnvError(f"environment archive {path}: a path with ',' or '#' cannot be "
                           "given to spark.archives; use another cache folder")
    return {
        "spark.archives": f"{path}#{ENV_DIR}",
        "spark.pyspark.python": EXECUTOR_PYTHON,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executorEnv.PYSPARK_PYTHON": EXECUTOR_PYTHON,
        "spark.executorEnv.PYTHONPATH": "",
    }


def check_environment(prefix: str | os.PathLike | None = None) -> str:
    """One line saying what the executors' machines need to run the archive of the running
    venv (or of ``prefix``), and the command that checks it on one of them.

    Parameters
    ----------
    prefix
        A venv's folder; None for the running interpreter's.

    Returns
    -------
    str
        One line, for a CLI's ``--check``.

    Notes
    -----
    A venv's ``bin/python`` is a symbolic link to its base interpreter (``pyvenv.cfg``'s
    ``home``): every worker needs that interpreter, same version, at the same path (a
    container image made from the driver's, or the same install on a shared path). On the
    cluster itself, :func:`probe_executors` runs one task per executor with the archive.

    Raises
    ------
    ShipEnvError
        Not a virtualenv.

    Examples
    --------
    >>> check_environment("/usr")
    Traceback (most recent call last):
    ...
    subzero.errors.ShipEnvError: cannot ship the Python environment: /usr is not a virtualenv ...
    """
    venv = venv_prefix(prefix)
    cfg = _pyvenv(venv)
    home = cfg.get("home", "?")
    version = cfg.get("version") or cfg.get("version_info") or "?"
    base = _base_python(venv / "bin" / "python") or Path(home) / "python3"
    return (f"executors need Python {version} at {base} (the base interpreter of {venv}, "
            f"pyvenv.cfg home = {home}); check a worker with: {base} -c 'import sys; "
            f"print(sys.version)' (expect {version})")


def _base_python(link: Path) -> Path | None:
    """The first target outside the venv in the chain of links from ``link`` (the venv's
    ``bin/python``): what the archive's ``bin/python`` points to; None if none leaves it."""
    venv = link.parent.parent
    for _ in range(40):  # a chain of links, not a loop
        if not link.is_symlink():
            return None
        link = Path(os.path.normpath(link.parent / os.readlink(link)))
        if not link.is_relative_to(venv):
            return link
    return None


def _probe(_: Any) -> Iterator[dict[str, str]]:
    """Run on an executor: where its Python and the project come from."""
    import socket

    import pyspark
    import subzero

    yield {"host": socket.gethostname(), "cwd": os.getcwd(), "python": sys.executable,
           "version": sys.version.split()[0], "subzero": subzero.__file__,
           "pyspark": pyspark.__file__}


def probe_executors(spark: Any, tasks: int = 2) -> list[dict[str, str]]:
    """What the executors run: a small job of ``tasks`` tasks, each reporting its host,
    working directory (``cwd``), ``sys.executable`` (``python``), Python ``version``, and
    where ``subzero`` and ``pyspark`` were imported from.

    With :func:`ship_conf`, ``python``, ``subzero`` and ``pyspark`` all lie under
    ``<cwd>/environment/``. An executor that cannot start the archive's Python fails the
    job (Spark's error names the program).

    Parameters
    ----------
    spark
        A :class:`~subzero.engine.spark.Session` or a ``SparkContext``.
    tasks
        Tasks (one partition each) to run.

    Returns
    -------
    list of dict
        One record per task, in task order.
    """
    sc = getattr(spark, "sparkContext", spark)
    return sc.parallelize(range(tasks), tasks).mapPartitions(_probe).collect()
