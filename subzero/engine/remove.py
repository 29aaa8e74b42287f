"""Removing runs (``subzero rm``, ``subzero gc``): their catalog rows and their folder.

A run holds its rows in the catalog (``runs`` and every table with a ``run`` column: arrays,
operators, op_stats, shards, statistics, named_cells) and its folder ``runs/<run>/``. The
query log keeps the queries asked of a removed run: it is the optimizer's workload, not the
run's data. ``removed_runs`` records each removal: the run's id, sequence number, workflow,
status and parent, when its rows went, and once its files are deleted, the bytes that freed.

**What other runs need.** Only a derived run (a what-if replay,
:mod:`subzero.replay`) uses another run's files: its shard rows name the shard
folders of the run it came from (and, for a run derived from a derived run, of that run's
own parent), and its unchanged arrays are symbolic links into those runs' folders. Its
chunk files, manifest and parameters are hard links, which stay whole when the other name
goes. Run ``A`` *needs* run ``B`` when ``A.parent`` is ``B``, a shard row of ``A`` lies in
``B``'s folder, or an array of ``A`` links into ``B``'s folder. A run is removed only with
every run that needs it: ``rm`` refuses naming them (``--with-derived`` removes them too),
``gc`` keeps it and says why. A ``running`` run is never removed (a process that died is
marked ``failed`` when the catalog is opened, :meth:`Catalog.reap_stale_runs`).

**Order of a removal**, chosen so that a process killed at any point leaves every kept run
whole, readers never see half a run, and the next ``rm``, ``gc`` or ``run`` finishes it:

1. Finish earlier removals: delete every ``runs/.removing.<run>.<token>`` folder, and
   every ``runs/<run>`` folder the catalog no longer lists whose run ``removed_runs`` names
   (renamed first, as in 2b). A folder named like a run that neither lists is left alone.
2. Per run, runs that need others before the runs they need (newest first):

   a. one transaction: check again that the run is not running and that nothing outside
      the removal needs it, add its ``removed_runs`` row, delete all its rows. From the
      commit on, no reader finds the run (lookups say "unknown run"); before it, the run
      is whole.
   b. rename ``runs/<run>`` to ``runs/.removing.<run>.<token>``, holding the catalog's
      write lock, and only while the catalog still does not list the run (a catalog
      never gives a removed run's id to another run, but one written by an older SubZero
      may have: such a run's folder is never taken for a leftover).
   c. delete the renamed folder, files first, not following links, counting the bytes
      freed (a file with other names elsewhere frees nothing until its last name goes).
   d. record the bytes freed and the time in ``removed_runs``.

A kill before 2a commits leaves the run as it was. A kill after it leaves a folder the
catalog does not list, under its own name (before 2b) or the ``.removing`` one: step 1
of the next removal deletes it, and a run's free-space check does too
(:func:`make_room`). Kept runs are never written. A reader that opened the run before
2a committed (a query under way) may meet its files gone; the next lookup does not find it.

Bytes are disk blocks (what ``df`` sees freed), counted per run in removal order.

>>> report = remove_runs("subzero-home", ["r3"])         # doctest: +SKIP
>>> [(r.run, r.bytes) for r in report.removed]          # doctest: +SKIP
[('r3', 1835008)]
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from subzero.engine import datastore, layout
from subzero.engine.catalog import Catalog
from subzero.engine.catalog.schema import SCHEMA
from subzero.engine.homeconfig import home_exists, open_catalog
from subzero.errors import CatalogError, StoreError, SubZeroError
from subzero.sizes import human_bytes

#: the name a run's folder takes while it is deleted: ``.removing.<run>.<token>``
TRASH_PREFIX = ".removing."
#: a run's folder name (``r12``)
RUN_NAME = re.compile(r"r[0-9]+")
#: tables with a ``run`` column that a removal leaves (the optimizer's workload)
KEEP_TABLES = frozenset({"query_log"})


class Refused(StoreError):
    """A run that cannot be removed: it is running, or a run not removed needs it."""


def _reached(step: str, run: str) -> None:
    """Where a removal is (``rows``, ``renamed``, ``unlink``, ``done``): nothing, here; a
    test stops the process at each of these points in turn."""


@dataclass
class Removed:
    """One run removed (or, under ``dry_run``, that would be), and the bytes that freed."""

    run: str
    workflow: str
    status: str
    bytes: int
    why: str
    parent: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run, "workflow": self.workflow, "status": self.status,
                "parent": self.parent, "bytes": self.bytes, "why": self.why}


@dataclass
class Kept:
    """A run (or folder) a selection named that is kept, and why."""

    run: str
    why: str

    def to_json(self) -> dict[str, str]:
        return {"run": self.run, "why": self.why}


@dataclass
class Removal:
    """What :func:`remove_runs` or :func:`collect_garbage` removed and kept."""

    dry_run: bool
    removed: list[Removed] = field(default_factory=list)
    kept: list[Kept] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.removed)

    def to_json(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "bytes": self.bytes,
                "removed": [r.to_json() for r in self.removed],
                "kept": [k.to_json() for k in self.kept]}


# -- what a removal frees -----------------------------------------------------------------
def _entry_bytes(st: os.stat_result) -> int:
    """The disk blocks of one entry, in bytes."""
    return int(getattr(st, "st_blocks", 0)) * 512


def _tree(path: str, seen: dict[tuple[int, int], int], delete: bool, rid: str) -> int:
    """The bytes the folder ``path`` frees (deleted when ``delete``), not following links.
    A file with several names frees its blocks with the last of them: ``seen`` counts the
    names met so far per file, across the runs of one removal."""
    freed = 0
    try:
        entries = list(os.scandir(path))
        top = os.lstat(path)
    except FileNotFoundError:  # deleted by another process meanwhile
        return 0
    for e in entries:
        try:
            st = e.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if e.is_dir(follow_symlinks=False):
            freed += _tree(e.path, seen, delete, rid)
            continue
        key = (st.st_dev, st.st_ino)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] >= st.st_nlink:
            freed += _entry_bytes(st)
        if delete:
            try:
                os.unlink(e.path)
            except FileNotFoundError:
                pass
            _reached("unlink", rid)
    freed += _entry_bytes(top)
    if delete:
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
    return freed


def _delete(path: Path, seen: dict[tuple[int, int], int], rid: str) -> int:
    try:
        return _tree(str(path), seen, True, rid)
    except OSError as e:
        raise StoreError(f"could not delete {e.filename or path} of removed run {rid}: "
                         f"{e.strerror or e}; 'subzero gc' finishes the removal") from None


# -- which runs need which ----------------------------------------------------------------
def _run_of(path: str, runs_root: str) -> str | None:
    rel = os.path.relpath(path, runs_root)
    first = rel.split(os.sep, 1)[0]
    return None if first in (os.pardir, os.curdir) else first


def _links(home: Path, derived: Iterable[str]) -> dict[str, set[str]]:
    """``{run: {derived runs whose arrays link into its folder}}``: the symbolic links of
    each derived run's ``arrays`` folder, followed hop by hop."""
    root = str(layout.run_dir(home, "x").parent)
    out: dict[str, set[str]] = {}
    for rid in derived:
        try:
            entries = list(os.scandir(layout.arrays_dir(home, rid)))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for e in entries:
            path = e.path
            for _ in range(40):  # a link to a link (never made by SubZero, followed anyway)
                try:
                    target = os.readlink(path)
                except OSError:
                    break
                path = os.path.normpath(os.path.join(os.path.dirname(path), target))
                owner = _run_of(path, root)
                if owner is not None and owner != rid:
                    out.setdefault(owner, set()).add(rid)
    return out


def _derived(db: sqlite3.Connection) -> list[str]:
    return [r[0] for r in db.execute("SELECT id FROM runs WHERE parent IS NOT NULL")]


def _needs(db: sqlite3.Connection, links: dict[str, set[str]], rid: str | None = None
           ) -> dict[str, set[str]]:
    """``{run: {runs that need it}}`` (see the module docstring): of run ``rid`` only, or of
    every run. ``links`` is :func:`_links`."""
    out: dict[str, set[str]] = {k: set(v) for k, v in links.items() if rid in (None, k)}
    q, args = "SELECT id, parent FROM runs WHERE parent IS NOT NULL", []
    if rid is not None:
        q, args = q + " AND parent = ?", [rid]
    for r in db.execute(q, args):
        out.setdefault(r["parent"], set()).add(r["id"])
    # only derived runs list shards outside their own folder (runs/<owner>/...)
    q = ("SELECT DISTINCT run, path FROM shards WHERE run IN (SELECT id FROM runs WHERE "
         "parent IS NOT NULL) AND path LIKE ?")
    for r in db.execute(q, ("runs/%/%" if rid is None else f"runs/{rid}/%",)):
        owner = r["path"].split("/", 2)[1]
        if owner != r["run"]:
            out.setdefault(owner, set()).add(r["run"])
    return out


def _names(runs: Iterable[str]) -> str:
    runs = sorted(set(runs), key=_seq_key)
    return ("run " if len(runs) == 1 else "runs ") + ", ".join(runs)


def _seq_key(rid: str) -> tuple[int, str]:
    return (int(rid[1:]) if RUN_NAME.fullmatch(rid) else 0, rid)


def _running(info: dict[str, Any]) -> str:
    where = "" if info.get("host") in (None, socket.gethostname()) else f" on {info['host']}"
    return (f"run {info['id']} is running (pid {info.get('pid')}{where}); wait for it to "
            "end, or stop it, before removing it")


# -- the removal itself -------------------------------------------------------------------
def _run_tables(cat: Catalog) -> list[str]:
    """Every table of the catalog's schema holding rows of runs by a ``run`` column, but
    :data:`KEEP_TABLES`."""
    tables = re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", SCHEMA)
    return [t for t in tables if t not in KEEP_TABLES and "run" in cat._columns(t)]


def _trash(home: Path, rid: str) -> Path:
    return layout.run_dir(home, rid).parent / f"{TRASH_PREFIX}{rid}.{secrets.token_hex(4)}"


def _move_away(cat: Catalog, home: Path, rid: str) -> Path | None:
    """Step 2b: ``runs/<rid>`` renamed to a ``.removing`` name, under the write lock and
    while the catalog does not list ``rid``; the new name (None: nothing to move)."""
    src = layout.run_dir(home, rid)
    dst = _trash(home, rid)
    with cat.tx() as db:
        if db.execute("SELECT 1 FROM runs WHERE id = ?", (rid,)).fetchone():
            return None  # a new run has this id: the folder is its
        try:
            os.rename(src, dst)
        except FileNotFoundError:
            return None  # moved or deleted by another process
        except OSError as e:
            raise StoreError(f"could not move {src} of removed run {rid} away: "
                             f"{e.strerror or e}; 'subzero gc' finishes the removal") from None
    _reached("renamed", rid)
    return dst


def _forget(cat: Catalog, rid: str, removing: set[str],
            links: dict[str, set[str]]) -> bool:
    """Step 2a: the run's rows gone and its ``removed_runs`` row added, in one transaction,
    after checking again (another process may have started a replay of it meanwhile);
    False when another process removed the run first. A run's id is never given again, so
    it names its ``removed_runs`` row."""
    with cat.tx() as db:
        row = db.execute("SELECT * FROM runs WHERE id = ?", (rid,)).fetchone()
        if row is None:
            return False
        if row["status"] == "running":
            raise Refused(_running(dict(row)))
        need = _needs(db, links, rid).get(rid, set()) - removing
        if need:
            raise Refused(_needed(rid, need))
        db.execute(
            "INSERT INTO removed_runs (id, seq, workflow, status, parent, started, removed) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (rid, row["seq"], row["workflow"], row["status"], row["parent"], row["started"],
             time.time()))
        for table in _run_tables(cat):
            db.execute(f"DELETE FROM {table} WHERE run = ?", (rid,))
        db.execute("DELETE FROM runs WHERE id = ?", (rid,))
    _reached("rows", rid)
    return True


def _needed(rid: str, need: set[str]) -> str:
    """The one-line refusal of removing run ``rid``, which runs ``need`` need."""
    one = len(need) == 1
    return (f"run {rid} is needed by derived {_names(need)} ({'it uses' if one else 'they use'}"
            f" its files); remove {'it' if one else 'them'} first, or "
            f"{'both' if one else 'all'} together with --with-derived")


def _remove(cat: Catalog, home: Path, info: dict[str, Any], why: str, removing: set[str],
            links: dict[str, set[str]], seen: dict[tuple[int, int], int], dry_run: bool
            ) -> Removed | None:
    """Steps 2a-2d for one run (under ``dry_run``, only the bytes it would free)."""
    rid = info["id"]
    done = Removed(rid, info["workflow"], info["status"], 0, why, info.get("parent"))
    remote = datastore.mounted(home) is not None
    if dry_run:
        done.bytes = (datastore.tree_bytes(layout.run_dir(home, rid)) if remote
                      else _tree(str(layout.run_dir(home, rid)), seen, False, rid))
        return done
    if not _forget(cat, rid, removing, links):
        return None
    if remote:  # its objects, then this machine's copies of its small files
        done.bytes = datastore.remove_tree(layout.run_dir(home, rid))
    else:
        moved = _move_away(cat, home, rid)
        if moved is not None:
            done.bytes = _delete(moved, seen, rid)
    with cat.tx() as db:
        db.execute("UPDATE removed_runs SET bytes = ?, done = ? WHERE id = ?",
                   (done.bytes, time.time(), rid))
    _reached("done", rid)
    return done


def finish_removals(cat: Catalog, home: Path, dry_run: bool = False,
                    seen: dict[tuple[int, int], int] | None = None
                    ) -> tuple[list[Removed], list[Kept]]:
    """Step 1 (see the module docstring): delete what interrupted removals left.

    Parameters
    ----------
    cat, home
        The home's open catalog, and the home.
    dry_run
        Change nothing: report what would be deleted.
    seen
        Names met so far per file, shared by the steps of one removal.

    Returns
    -------
    tuple of list of Removed and list of Kept
        The runs whose leftovers went (with the bytes freed), and the folders of
        ``runs/`` named like a run that neither the catalog nor a removal knows (left
        alone).
    """
    root = layout.run_dir(home, "x").parent
    if datastore.mounted(home) is not None:
        return _finish_remote(cat, home, dry_run)
    try:  # listed before the catalog is read: a new run's row is made before its folder
        names = sorted(os.listdir(root), key=_seq_key)
    except (FileNotFoundError, NotADirectoryError):
        return [], []
    listed = {r[0] for r in cat.db.execute("SELECT id FROM runs")}
    gone = {r["id"]: dict(r) for r in cat.db.execute(
        "SELECT * FROM removed_runs ORDER BY seq")}
    seen = {} if seen is None else seen
    removed: list[Removed] = []
    kept: list[Kept] = []
    for name in names:
        if name.startswith(TRASH_PREFIX):
            rid = name[len(TRASH_PREFIX):].rsplit(".", 1)[0]
            path: Path | None = root / name
        elif RUN_NAME.fullmatch(name) and name not in listed:
            rid = name
            if rid not in gone:
                kept.append(Kept(rid, f"folder {root / name} is neither a run of the catalog "
                                      "nor one it removed: left alone"))
                continue
            path = root / name if dry_run else _move_away(cat, home, rid)
        else:
            continue
        row = gone.get(rid, {})
        freed = 0
        if path is not None:
            freed = (_tree(str(path), seen, False, rid) if dry_run
                     else _delete(path, seen, rid))
        if not dry_run and row:
            with cat.tx() as db:
                db.execute("UPDATE removed_runs SET bytes = COALESCE(bytes, 0) + ?, done = ? "
                           "WHERE id = ?", (freed, time.time(), rid))
        if path is not None:
            removed.append(Removed(rid, row.get("workflow", "?"), row.get("status", "?"),
                                   freed, "left by an interrupted removal", row.get("parent")))
    if not dry_run and cat.db.execute(  # removals killed after their folder was deleted
            "SELECT 1 FROM removed_runs WHERE done IS NULL LIMIT 1").fetchone():
        with cat.tx() as db:
            db.execute("UPDATE removed_runs SET done = ? WHERE done IS NULL AND id NOT IN "
                       "(SELECT id FROM runs)", (time.time(),))
    return removed, kept


def _finish_remote(cat: Catalog, home: Path, dry_run: bool
                   ) -> tuple[list[Removed], list[Kept]]:
    """:func:`finish_removals` for an object-store home: the objects of runs the catalog
    removed (a removal interrupted after its rows went) are deleted, and so are the shard
    objects of finished runs that no catalog row names (attempts that lost, when the run
    that should have swept them did not get to); objects of a run neither listed nor
    removed are left alone, said as kept."""
    names = datastore.run_names(home)  # before the catalog is read, as for a folder
    listed = {r[0] for r in cat.db.execute("SELECT id FROM runs")}
    if not dry_run:
        for info in cat.runs():
            if info["status"] != "running" and info["id"] in names:
                datastore.sweep_attempts(home, info["id"],
                                         [r["path"] for r in cat.shards(info["id"])])
    gone = {r["id"]: dict(r) for r in cat.db.execute(
        "SELECT * FROM removed_runs ORDER BY seq")}
    removed: list[Removed] = []
    kept: list[Kept] = []
    for rid in sorted(set(names) - listed, key=_seq_key):
        where = f"{datastore.mounted(home).url.rstrip('/')}/runs/{rid}/"
        if not RUN_NAME.fullmatch(rid) or rid not in gone:
            kept.append(Kept(rid, f"objects under {where} are neither a run of the catalog "
                                  "nor one it removed: left alone"))
            continue
        row = gone[rid]
        run = layout.run_dir(home, rid)
        freed = datastore.tree_bytes(run) if dry_run else datastore.remove_tree(run)
        if not dry_run:
            with cat.tx() as db:
                db.execute("UPDATE removed_runs SET bytes = COALESCE(bytes, 0) + ?, done = ? "
                           "WHERE id = ?", (freed, time.time(), rid))
        removed.append(Removed(rid, row.get("workflow", "?"), row.get("status", "?"), freed,
                               "left by an interrupted removal", row.get("parent")))
    if not dry_run:
        with cat.tx() as db:
            db.execute("UPDATE removed_runs SET done = ? WHERE done IS NULL AND id NOT IN "
                       "(SELECT id FROM runs)", (time.time(),))
    return removed, kept


def _open(home: str | os.PathLike | None) -> tuple[Catalog, Path]:
    home = layout.resolve_home(home)
    return open_catalog(home), home


def _carry_out(cat: Catalog, home: Path, chosen: dict[str, tuple[dict[str, Any], str]],
               links: dict[str, set[str]], report: Removal, seen: dict[tuple[int, int], int],
               notify: Callable[[str], None] | None, keep_refused: bool = False) -> None:
    """Step 2 for every chosen run (``{run: (its row, why)}``): runs that need others
    before those they need, that is newest first (a derived run is always newer than the
    runs whose files it uses). A run that another process replayed since it was chosen
    (a new derived run needs it) is refused: raised, or kept with the reason when
    ``keep_refused`` (the runs it needs are then refused in turn, as it needs them)."""
    removing = set(chosen)
    for info, why in sorted(chosen.values(), key=lambda c: -int(c[0]["seq"])):
        try:
            one = _remove(cat, home, info, why, removing, links, seen, report.dry_run)
        except Refused as e:
            if not keep_refused:
                raise
            removing.discard(info["id"])
            report.kept.append(Kept(info["id"], str(e)))
            continue
        if one is None:
            continue
        report.removed.append(one)
        if notify is not None:
            notify(f"{'would remove' if report.dry_run else 'removed'} run {one.run} "
                   f"({one.workflow}, {one.status}): {human_bytes(one.bytes)}")


def _closure(chosen: set[str], needs: dict[str, set[str]]) -> set[str]:
    """``chosen`` with every run that needs one of them, and so on."""
    out = set(chosen)
    while True:
        more = {n for rid in out for n in needs.get(rid, ())} - out
        if not more:
            return out
        out |= more


def remove_runs(home: str | os.PathLike | None, runs: Sequence[str], with_derived: bool = False,
                dry_run: bool = False, notify: Callable[[str], None] | None = None
                ) -> Removal:
    """Remove runs ``runs`` (ids, ``latest`` or ``latest:WORKFLOW``) of ``home``: their
    catalog rows and folders, in the order the module docstring gives, after finishing
    interrupted removals.

    Parameters
    ----------
    home
        The SubZero home (None: ``$SUBZERO_HOME`` or ``./subzero-home``).
    runs
        The runs to remove. A run removed before (its removal perhaps interrupted) is
        reported with what finishing it freed.
    with_derived
        Remove every run that needs their files too (the runs derived from them); without
        it such a run is refused, naming them.
    dry_run
        Change nothing: report what would be removed and freed.
    notify
        Hears one line per run removed.

    Returns
    -------
    Removal
        The runs removed, with the bytes each freed.

    Raises
    ------
    CatalogError
        An unknown run.
    Refused
        A run that is running, or that a run not removed needs (without ``with_derived``):
        nothing is removed when it is found before the first removal, as it is unless
        another process starts a run or a replay meanwhile.
    StoreError
        A file of a removed run that cannot be deleted (``subzero gc`` finishes it).
    """
    cat, home = _open(home)
    try:
        report = Removal(dry_run)
        earlier = {r["id"]: dict(r) for r in cat.db.execute("SELECT * FROM removed_runs")}
        infos: dict[str, dict[str, Any]] = {}
        again: list[str] = []
        for name in dict.fromkeys(runs):
            try:
                info = cat.run(name)
            except CatalogError:
                if name not in earlier:
                    raise
                again.append(name)
                continue
            infos[info["id"]] = info
        asked = set(infos)
        links = _links(home, _derived(cat.db))
        needs = _needs(cat.db, links)
        chosen = _closure(asked, needs)
        if not with_derived and chosen != asked:
            rid = min((r for r in asked if needs.get(r, set()) - asked), key=_seq_key)
            raise Refused(_needed(rid, needs[rid] - asked))
        for rid in sorted(chosen - set(infos), key=_seq_key):
            infos[rid] = cat.run(rid)
        for info in sorted(infos.values(), key=lambda i: i["seq"]):
            if info["status"] == "running":
                raise Refused(_running(info))
        seen: dict[tuple[int, int], int] = {}
        done, report.kept = finish_removals(cat, home, dry_run, seen)
        report.removed.extend(done)
        for rid in again:
            if not any(r.run == rid for r in done):
                row = earlier[rid]
                report.removed.append(Removed(rid, row["workflow"], row["status"], 0,
                                              "removed before", row["parent"]))
        _carry_out(cat, home, {rid: (info, "named" if rid in asked else
                                     f"derived from {info.get('parent')}")
                               for rid, info in infos.items()}, links, report, seen, notify)
        return report
    finally:
        cat.close()


def collect_garbage(home: str | os.PathLike | None, failed: bool = False,
                    older_than: float | None = None, keep_last: int | None = None,
                    dry_run: bool = False, now: float | None = None,
                    notify: Callable[[str], None] | None = None) -> Removal:
    """Remove the runs of ``home`` that the criteria select, after finishing interrupted
    removals.

    The criteria narrow each other: ``failed`` selects failed runs only, ``older_than``
    runs started more than that many seconds before ``now``, and ``keep_last`` keeps the
    newest ``keep_last`` complete runs of each workflow (alone, it selects every other
    run). No criterion selects nothing: only interrupted removals are finished. A running
    run is never selected; a selected run that a run not selected needs (a derived run
    uses its files) is kept, saying so.

    Parameters
    ----------
    home
        The SubZero home (None: ``$SUBZERO_HOME`` or ``./subzero-home``).
    failed, older_than, keep_last
        What to remove; see above.
    dry_run
        Change nothing: report what would be removed and freed.
    now
        The time ``older_than`` counts back from (default: now).
    notify
        Hears one line per run removed.

    Returns
    -------
    Removal
        The runs removed, with the bytes each freed, and the selected runs kept.

    Raises
    ------
    SubZeroError
        A negative ``older_than`` or ``keep_last``.

    Examples
    --------
    >>> collect_garbage("subzero-home", failed=True, dry_run=True).bytes  # doctest: +SKIP
    290455552
    """
    if older_than is not None and not (isinstance(older_than, (int, float))
                                       and older_than >= 0):
        raise SubZeroError(f"older than {older_than!r} seconds: expected a number, 0 or more")
    if keep_last is not None and not (isinstance(keep_last, int)
                                      and not isinstance(keep_last, bool) and keep_last >= 0):
        raise SubZeroError(f"keep last {keep_last!r}: expected a whole number of runs, 0 or "
                           "more")
    now = time.time() if now is None else now
    cat, home = _open(home)
    try:
        report = Removal(dry_run)
        runs = cat.runs()  # after the catalog is opened: runs of dead processes are failed
        newest: dict[str, list[str]] = {}
        for info in sorted(runs, key=lambda i: -int(i["seq"])):
            if info["status"] == "complete":
                newest.setdefault(info["workflow"], []).append(info["id"])
        chosen: dict[str, tuple[dict[str, Any], str]] = {}
        for info in runs:
            if info["status"] == "running" or not (
                    failed or older_than is not None or keep_last is not None):
                continue
            why = []
            if failed:
                if info["status"] != "failed":
                    continue
                why.append("failed")
            if older_than is not None:
                if info["started"] > now - older_than:
                    continue
                why.append(f"started {_age(now - info['started'])} ago")
            if keep_last is not None:
                if info["id"] in newest.get(info["workflow"], [])[:keep_last]:
                    continue
                if not why:
                    why.append(f"not the newest complete run of {info['workflow']}"
                               if keep_last == 1 else f"not among the {keep_last} newest "
                               f"complete runs of {info['workflow']}")
            chosen[info["id"]] = (info, ", ".join(why))
        links = _links(home, _derived(cat.db))
        needs = _needs(cat.db, links)
        while True:  # a run that a run not chosen needs is kept
            held = {rid: needs.get(rid, set()) - set(chosen) for rid in chosen}
            held = {rid: n for rid, n in held.items() if n}
            if not held:
                break
            for rid, n in sorted(held.items(), key=lambda kv: _seq_key(kv[0])):
                del chosen[rid]
                uses = "uses" if len(n) == 1 else "use"
                report.kept.append(Kept(rid, f"derived {_names(n)} (kept) {uses} its files; "
                                             f"'subzero rm {rid} --with-derived' removes "
                                             "them together"))
        seen: dict[tuple[int, int], int] = {}
        done, kept = finish_removals(cat, home, dry_run, seen)
        report.removed.extend(done)
        report.kept.extend(kept)
        _carry_out(cat, home, chosen, links, report, seen, notify, keep_refused=True)
        return report
    finally:
        cat.close()


def _age(seconds: float) -> str:
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= n:
            return f"{seconds / n:.0f}{unit}"
    return f"{seconds:.0f}s"


def make_room(home: str | os.PathLike, shortfall: int,
              notify: Callable[[str], None] | None = None, dry_run: bool = False) -> int:
    """Free at least ``shortfall`` bytes of ``home`` for a new run, if failed runs can.

    Interrupted removals are finished first (whatever the shortfall). Then failed runs
    are removed, oldest first, until enough is freed: a failed run that a run not failed
    needs stays, and when all of them together would not free enough, none is removed.
    A home without a catalog frees nothing and is not created.

    Parameters
    ----------
    home
        The SubZero home.
    shortfall
        The bytes a new run lacks (0 or less: only interrupted removals are finished).
    notify
        Hears one line per run removed.
    dry_run
        Change nothing: the bytes that would be freed.

    Returns
    -------
    int
        The bytes freed.
    """
    home = layout.resolve_home(home)
    if not home_exists(home):
        return 0
    cat = open_catalog(home)
    try:
        seen: dict[tuple[int, int], int] = {}
        done, _ = finish_removals(cat, home, dry_run, seen)
        freed = sum(r.bytes for r in done)
        if freed >= shortfall:
            return freed
        links = _links(home, _derived(cat.db))
        needs = _needs(cat.db, links)
        failed = {i["id"]: i for i in cat.runs() if i["status"] == "failed"}
        while True:  # only failed runs need these
            held = {rid for rid in failed if needs.get(rid, set()) - set(failed)}
            if not held:
                break
            for rid in held:
                del failed[rid]
        dry = Removal(True)
        _carry_out(cat, home, {r: (i, "") for r, i in failed.items()}, links, dry, {}, None)
        size = {r.run: r.bytes for r in dry.removed}
        picked: set[str] = set()
        for rid in sorted(failed, key=_seq_key):  # oldest first, with what needs it
            picked |= _closure({rid}, needs)
            if freed + sum(size[r] for r in picked) >= shortfall:
                break
        else:
            return freed  # all of them would not do
        if dry_run:
            return freed + sum(size[r] for r in picked)
        report = Removal(False)
        _carry_out(cat, home, {r: (failed[r], "failed: its space was needed by a new run")
                               for r in picked}, links, report, seen, notify,
                   keep_refused=True)
        return freed + report.bytes
    finally:
        cat.close()


__all__ = ["remove_runs", "collect_garbage", "finish_removals", "make_room", "Removal",
           "Removed", "Kept", "Refused", "TRASH_PREFIX"]
