"""Which code made a run: modules found, hashed and imported only after they are checked.

A run records, for every module its operators come from (and every module its parameters
name), a :class:`ModuleRecord`: the module's source file, its SHA-256, and the installed
distribution and version it belongs to. A later process that loads the run checks each
record *before* importing anything: the module's file is found on the import path without
executing it (:func:`locate`), hashed, and compared. A module whose code changed since the
run is not imported unless the caller allows it; a module that names a distribution it does
not belong to, or lies inside the home, is refused outright.

>>> rec = record("subzero.cells")
>>> rec.module, rec.distribution is not None, len(rec.sha256)
('subzero.cells', True, 64)
>>> check_module_name("os.path"), check_module_name("../evil") is None
('os.path', True)
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable, Mapping

from subzero.errors import CodeError

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
#: the distribution name recorded for the standard library's modules
STDLIB = "python"
#: packages whose changes never refuse a run's operators: SubZero itself (the engine that
#: runs operators, versioned by its distribution), not an operator's own code
ENGINE_PACKAGES = ("subzero",)


def check_module_name(name: Any) -> str | None:
    """``name`` when it is a dotted module name, else None."""
    return name if isinstance(name, str) and _DOTTED.match(name) else None


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes, in hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def locate(module: str) -> Path | None:
    """The file module ``module`` would be imported from, found without executing any code
    (a loaded module's own ``__file__``); None when it is not found or has no file."""
    mod = sys.modules.get(module)
    if mod is not None:
        f = getattr(mod, "__file__", None)
        return Path(f).resolve() if f else None
    parts = module.split(".")
    search: list[str] | None = None
    spec = None
    for k in range(len(parts)):
        name = ".".join(parts[:k + 1])
        loaded = sys.modules.get(name)
        if loaded is not None and k < len(parts) - 1:
            search = list(getattr(loaded, "__path__", []) or [])
            continue
        try:
            if k == 0:  # every finder of the import system (an editable install has its
                # own), which finds a top-level module without executing it
                spec = importlib.util.find_spec(name)
            else:  # a submodule, in its package's folders only: its package not imported
                spec = importlib.machinery.PathFinder.find_spec(name, search)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            return None
        search = list(spec.submodule_search_locations or [])
    if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
        return None
    return Path(spec.origin).resolve()


@lru_cache(maxsize=1)
def _dist_infos() -> dict[str, Path]:
    """Installed distributions' metadata folders (``*.dist-info``) on the import path, by
    normalised name: read directly, which is quicker to start than importing
    :mod:`importlib.metadata` in every command that loads a run."""
    out: dict[str, Path] = {}
    for entry in sys.path:
        try:
            with os.scandir(entry or ".") as it:
                names = [e.name for e in it if e.name.endswith(".dist-info")]
        except OSError:
            continue
        for n in sorted(names):
            out.setdefault(_norm(n[:-len(".dist-info")].split("-")[0]), Path(entry or ".") / n)
    return out


def _dist(name: str) -> Path | None:
    return _dist_infos().get(_norm(name))


def _read(folder: Path, name: str) -> str | None:
    try:
        return (folder / name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _dist_name(folder: Path) -> str:
    """A distribution's name as its metadata spells it (``Name:``)."""
    for line in (_read(folder, "METADATA") or "").splitlines():
        if line.startswith("Name:"):
            return line.split(":", 1)[1].strip()
        if not line.strip():
            break
    return folder.name[:-len(".dist-info")].split("-")[0]


def _dist_version(folder: Path) -> str | None:
    for line in (_read(folder, "METADATA") or "").splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
        if not line.strip():
            break
    return None


@lru_cache(maxsize=None)
def _tops(name: str) -> frozenset[str] | None:
    """The top-level modules installed distribution ``name`` provides (its
    ``top_level.txt``, else the first part of each path its ``RECORD`` lists); None when it
    is not installed."""
    folder = _dist(name)
    if folder is None:
        return None
    text = _read(folder, "top_level.txt")
    if text:
        return frozenset(text.split())
    tops = set()
    for line in (_read(folder, "RECORD") or "").splitlines():
        first = line.split(",", 1)[0].split("/", 1)[0]
        if first.endswith(".py"):
            first = first[:-3]
        if first and not first.endswith((".dist-info", ".egg-info", ".data")) and \
                first != "..":
            tops.add(first.split(".")[0])
    return frozenset(tops)


@lru_cache(maxsize=1)
def _top_level_index() -> dict[str, str]:
    """Top-level module -> distribution, from the distributions that list their top-level
    modules (``top_level.txt``): quick, unlike reading every ``RECORD``."""
    out: dict[str, str] = {}
    for folder in _dist_infos().values():
        for top in (_read(folder, "top_level.txt") or "").split():
            out.setdefault(top, _dist_name(folder))
    return out


def belongs(module: str, dist: str) -> bool:
    """Whether installed distribution ``dist`` provides ``module`` (``"python"``: the
    standard library). Reads that distribution's metadata only."""
    top = module.split(".")[0]
    if dist == STDLIB:
        return top in sys.stdlib_module_names
    if _norm(dist) == _norm(top):  # a distribution named after its package (numpy, scipy)
        return _dist(dist) is not None
    tops = _tops(dist)
    return tops is not None and top in tops


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def distribution(module: str) -> tuple[str | None, str | None]:
    """The installed distribution that provides ``module`` and its version, ``("python",
    version)`` for the standard library, ``(None, None)`` for a module outside any."""
    top = module.split(".")[0]
    if top in sys.stdlib_module_names:
        return STDLIB, ".".join(str(v) for v in sys.version_info[:3])
    name = None
    d = _dist(top)  # most distributions are named after their package (numpy, scipy)
    if d is not None:
        name = _dist_name(d)
    if name is None:
        name = _top_level_index().get(top)
    if name is None:
        f = locate(module)
        if f is not None and any(p in ("site-packages", "dist-packages") for p in f.parts):
            import importlib.metadata  # every RECORD: slow, and only for odd packages

            names = importlib.metadata.packages_distributions().get(top) or []
            name = names[0] if names else None
    if name is None:
        return None, None
    folder = _dist(name)
    return name, None if folder is None else _dist_version(folder)


@dataclass(frozen=True)
class ModuleRecord:
    """One module a run's workflow names: where it was, its digest, where it came from.

    ``root`` is the folder on the import path the module was found under (recorded for
    modules outside any distribution, which later processes import from their files).
    """

    module: str
    file: str | None
    sha256: str | None
    distribution: str | None
    version: str | None
    root: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "module"}

    @classmethod
    def from_json(cls, module: str, doc: Any) -> "ModuleRecord":
        if check_module_name(module) is None or not isinstance(doc, dict):
            raise CodeError(f"the manifest names module {module!r}, which is not a module "
                            "name")
        vals = {k: doc.get(k) for k in ("file", "sha256", "distribution", "version", "root")}
        if not all(v is None or isinstance(v, str) for v in vals.values()):
            raise CodeError(f"the manifest's record of module {module!r} is malformed")
        return cls(module, **vals)


def record(module: str) -> ModuleRecord:
    """The record of importable module ``module`` as it is now (imported if need be: the
    run that records it is about to run its code)."""
    mod = importlib.import_module(module)
    f = getattr(mod, "__file__", None)
    dist, version = distribution(module)
    path = Path(f).resolve() if f else None
    root = None
    if path is not None and dist is None:
        depth = module.count(".") + (1 if path.name == "__init__.py" else 0)
        root = str(path.parents[depth])
    return ModuleRecord(module, None if path is None else str(path),
                        None if path is None else file_sha256(path), dist, version, root)


def ancestors(module: str) -> list[str]:
    """The packages importing ``module`` imports first, outermost first.

    >>> ancestors("a.b.c")
    ['a', 'a.b']
    """
    parts = module.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts))]


def combined_digest(records: Iterable[ModuleRecord]) -> str:
    """One digest of several modules' code (what an operator runs)."""
    h = hashlib.sha256()
    for r in sorted(records, key=lambda r: r.module):
        h.update(f"{r.module}\0{r.sha256}\n".encode())
    return h.hexdigest()


@dataclass(frozen=True)
class Changed:
    """A module whose file is not the one the run recorded."""

    module: str
    recorded: str | None
    now: str | None

    def text(self) -> str:
        def short(d: str | None) -> str:
            return "missing" if d is None else d[:12]

        if self.now is None:
            return (f"module {self.module} cannot be found here (the run recorded sha256 "
                    f"{short(self.recorded)})")
        return (f"module {self.module} changed since the run (sha256 {short(self.recorded)} "
                f"recorded, {short(self.now)} now)")


class CodeGate:
    """Checks a run's module records against the environment and imports what passes.

    Parameters
    ----------
    records : the run's module records, by module name.
    home : the home the run lives in (no module is ever imported from inside it).
    allow_changed : import modules whose code changed since the run anyway.
    """

    def __init__(self, records: Mapping[str, ModuleRecord], home: Path | None = None,
                 allow_changed: bool = False) -> None:
        self.records = dict(records)
        self.home = None if home is None else Path(home).resolve()
        self.allow_changed = allow_changed
        self._checked: dict[str, Changed | None] = {}

    def check_all(self) -> None:
        """Refuse records that can never be imported safely (outside their distribution,
        inside the home, a module name that is not one); nothing is imported."""
        for rec in self.records.values():
            self._refuse_unsafe(rec)

    def _refuse_unsafe(self, rec: ModuleRecord) -> None:
        if check_module_name(rec.module) is None:
            raise CodeError(f"the manifest names module {rec.module!r}, which is not a module "
                            "name")
        if rec.distribution is not None and not belongs(rec.module, rec.distribution):
            raise CodeError(f"module {rec.module} is recorded as part of distribution "
                            f"{rec.distribution!r}, which does not provide it here; refusing "
                            "to import it")
        for f in (rec.file, rec.root):
            if f is not None and self.home is not None and _inside(Path(f), self.home):
                raise CodeError(f"module {rec.module} is recorded at {f}, inside the home; "
                                "code is never imported from a home")
        if rec.distribution is None and rec.file is not None:
            # a module of no distribution is imported from the file the run recorded: only
            # from a file this user (or the system) owns, never one another user planted
            try:
                owner = os.stat(rec.file).st_uid
            except OSError:
                return  # missing: reported as changed, or when it is imported
            if owner not in trusted_owners():
                raise CodeError(f"module {rec.module} is recorded at {rec.file}, a file of "
                                f"user {owner}, not yours; refusing to import it")

    def changed(self, module: str) -> Changed | None:
        """How ``module`` (and the packages above it) differ from the run's record, or None
        when they are the code the run recorded."""
        if module in self._checked:
            return self._checked[module]
        out = None
        if module.split(".")[0] in ENGINE_PACKAGES:
            self._checked[module] = None
            return None
        for name in [*ancestors(module), module]:
            rec = self.records.get(name)
            if rec is None or rec.sha256 is None:
                continue  # a namespace package, or a module without a file (built in)
            path = self._path(rec)
            now = file_sha256(path) if path is not None and path.is_file() else None
            if now != rec.sha256:
                out = Changed(name, rec.sha256, now)
                break
        self._checked[module] = out
        return out

    def _path(self, rec: ModuleRecord) -> Path | None:
        if rec.distribution is None and rec.file is not None:
            return Path(rec.file)
        return locate(rec.module)

    def check(self, module: str) -> ModuleRecord:
        """``module``'s record, once it is known safe and unchanged (or changes are
        allowed); raises :class:`CodeError` in one line otherwise. Imports nothing."""
        rec = self.records.get(module)
        if rec is None:
            raise CodeError(f"the manifest names module {module!r} without recording its code; "
                            "refusing to import it")
        self._refuse_unsafe(rec)
        ch = self.changed(module)
        if ch is not None and ch.now is None:
            where = f" at {rec.file}" if rec.file else ""
            raise CodeError(f"{ch.text()}; restore it{where} (or install it) to run what "
                            "needs its code")
        if ch is not None and not self.allow_changed:
            raise CodeError(f"{ch.text()}; pass --allow-changed-code to use it anyway")
        return rec

    def import_module(self, module: str) -> ModuleType:
        """``module``, imported after its record is checked; raises :class:`CodeError` in
        one line when it is not recorded, unsafe, changed (unless allowed) or fails."""
        rec = self.check(module)
        try:
            if rec.distribution is None and rec.file is not None:
                return self._import_file(rec)
            return importlib.import_module(module)
        except CodeError:
            raise
        except Exception as e:  # noqa: BLE001 - the user's module, reported in one line
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            where = f" ({rec.file})" if rec.file else ""
            raise CodeError(f"module {module}{where} cannot be imported: "
                            f"{type(e).__name__}: {msg}") from None

    def _import_file(self, rec: ModuleRecord) -> ModuleType:
        """A module outside any distribution, from the file the run recorded (and its
        packages from theirs): what was checked is what runs."""
        loaded = sys.modules.get(rec.module)
        if loaded is not None:
            f = getattr(loaded, "__file__", None)
            if f and rec.file and Path(f).resolve() == Path(rec.file).resolve():
                return loaded
            raise CodeError(f"module {rec.module} is already imported from {f}, not from the "
                            f"recorded {rec.file}")
        for name in ancestors(rec.module):
            if name not in sys.modules:
                parent = self.records.get(name)
                if parent is None or parent.file is None:
                    raise CodeError(f"package {name} of module {rec.module} is not recorded")
                self._load(name, Path(parent.file))
        return self._load(rec.module, Path(rec.file or ""))

    @staticmethod
    def _load(name: str, path: Path) -> ModuleType:
        if not path.is_file():
            raise CodeError(f"module {name} is no longer at {path}")
        return exec_file(name, path)

    def import_object(self, path: str) -> Any:
        """The object ``module:qualname`` names, its module imported through the gate."""
        module, _, qualname = path.partition(":")
        if check_module_name(module) is None or not qualname or not all(
                p.isidentifier() for p in qualname.split(".")):
            raise CodeError(f"the manifest names {path!r}; expected module:name")
        obj: Any = self.import_module(module)
        for part in qualname.split("."):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                raise CodeError(f"module {module} has no {qualname!r} (named by the manifest "
                                f"as {path})") from None
        return obj


def exec_file(name: str, path: Path) -> ModuleType:
    """Import the Python file ``path`` as module ``name`` (a package's ``__init__.py`` as
    that package), registered in ``sys.modules``; whatever the file raises is raised, and
    leaves no half-imported module behind. ``ImportError`` when it is not Python source."""
    is_pkg = path.name == "__init__.py"
    spec = importlib.util.spec_from_file_location(
        name, path, submodule_search_locations=[str(path.parent)] if is_pkg else None)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a Python module")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


def trusted_owners() -> set[int]:
    """The owners whose files a run's modules of no distribution may be imported from:
    this user and the system (root)."""
    return {os.getuid(), 0}


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder)
    except ValueError:
        return False
    return True
