"""What a run recorded of its workflow in the catalog: its arrays (inputs with where they
came from, and what each operator wrote) and its operators (their parameters, lineage
modes and code)."""

from __future__ import annotations

import json
from typing import Any, Mapping

from subzero.engine.catalog.base import CatalogBackend, loads


class RunContents(CatalogBackend):
    """The arrays and operators of runs."""

    # -- arrays ----------------------------------------------------------------------------
    def add_array(self, rid: str, name: str, shape: tuple, dtype: str, chunks: tuple,
                  producer: str | None, nbytes: int, stored_bytes: int | None = None,
                  origin: dict[str, Any] | None = None) -> None:
        """Record an array of run ``rid``; an input's ``origin`` says where its data came
        from.

        Parameters
        ----------
        rid, name : str
            The run and the array's name.
        shape, chunks : tuple of int
            Its shape and chunk shape.
        dtype : str
            Its dtype.
        producer : str or None
            The operator that wrote it; None for an input.
        nbytes : int
            Its size in memory.
        stored_bytes : int, optional
            Its size on disk.
        origin : dict, optional
            Where an input came from (JSON).
        """
        with self.tx() as db:
            db.execute(
                "INSERT INTO arrays (run, name, shape, dtype, chunks, producer, nbytes, "
                "stored_bytes, origin) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (rid, name, json.dumps(list(shape)), dtype, json.dumps(list(chunks)), producer,
                 nbytes, stored_bytes, None if origin is None else json.dumps(origin)),
            )

    def set_array_bytes(self, rid: str, stored_bytes: dict[str, int]) -> None:
        """Set the bytes on disk of arrays of run ``rid`` (name -> bytes), in one
        transaction."""
        with self.tx() as db:
            db.executemany("UPDATE arrays SET stored_bytes = ? WHERE run = ? AND name = ?",
                           [(n, rid, name) for name, n in stored_bytes.items()])

    def arrays(self, rid: str) -> dict[str, dict[str, Any]]:
        """The arrays of run ``rid`` by name (``shape`` and ``chunks`` as tuples,
        ``origin`` decoded)."""
        out = {}
        for r in self.db.execute("SELECT * FROM arrays WHERE run = ?", (rid,)):
            d = dict(r)
            d["shape"] = tuple(json.loads(d["shape"]))
            d["chunks"] = tuple(json.loads(d["chunks"]))
            d["origin"] = loads(d["origin"])
            out[d["name"]] = d
        return out

    def newest_with_array(self, name: str) -> dict[str, Any] | None:
        """The newest complete run that has an array ``name`` (its ``id`` and
        ``workflow``), or None: what ``latest:WORKFLOW`` to suggest when ``latest`` lacks it."""
        row = self.db.execute(
            "SELECT runs.id, runs.workflow FROM runs JOIN arrays ON arrays.run = runs.id "
            "WHERE runs.status = 'complete' AND arrays.name = ? ORDER BY runs.seq DESC LIMIT 1",
            (name,)).fetchone()
        return None if row is None else dict(row)

    def missing_array(self, requested: str, info: dict[str, Any], name: str,
                      arrays: Any) -> str:
        """The one-line error for run ``info`` (asked for as ``requested``) lacking array
        ``name``: when ``requested`` is ``latest``, which workflow that is, and the
        ``latest:WORKFLOW`` whose newest run has the array.

        Parameters
        ----------
        requested : str
            The run as asked for (``r3``, ``latest``).
        info : dict
            The run's row (:meth:`.Runs.run`).
        name : str
            The array asked for.
        arrays : iterable of str
            The arrays the run has.

        Returns
        -------
        str
            The message.
        """
        known = f"arrays: {', '.join(arrays)}"
        if requested not in ("latest", "last"):
            return f"run {info['id']} has no array {name!r} ({known})"
        head = (f"run {info['id']} ({requested}: the newest run of any workflow, here "
                f"{info['workflow']!r}) has no array {name!r}")
        other = self.newest_with_array(name)
        if other is None:
            return f"{head}; no complete run has one ({known})"
        return (f"{head}; use {requested}:{other['workflow']} for the newest run of "
                f"{other['workflow']!r} ({known})")

    def input_origins(self, rid: str | None = None) -> dict[str, dict[str, Any]]:
        """Where each input came from, ``{run: {input: origin}}`` (one run's, or every
        run's); an origin is None for runs recorded before origins were."""
        q = "SELECT run, name, origin FROM arrays WHERE producer IS NULL"
        order = f" ORDER BY {self._insertion_order}"
        rows = (self.db.execute(q + order) if rid is None
                else self.db.execute(q + " AND run = ?" + order, (rid,)))
        out: dict[str, dict[str, Any]] = {}
        for r in rows:
            out.setdefault(r["run"], {})[r["name"]] = loads(r["origin"])
        return out

    # -- operators -------------------------------------------------------------------------
    def add_operator(self, rid: str, position: int, name: str, cls: str, kind: str,
                     params: dict, inputs: list[str], supported_modes: list[str],
                     strategies: list[str], parallelism: str,
                     code: dict[str, Any] | None = None) -> None:
        """Record an operator of run ``rid``.

        Parameters
        ----------
        rid : str
            The run.
        position : int
            Its place in the workflow.
        name, cls, kind : str
            Its name, class and kind.
        params : dict
            Its parameters (JSON, others as text).
        inputs : list of str
            The arrays it reads.
        supported_modes, strategies : list of str
            The lineage modes it supports and the strategies it records.
        parallelism : str
            How its tasks are cut.
        code : dict, optional
            Its class, the digest of the modules it runs and where they came from.
        """
        with self.tx() as db:
            db.execute(
                "INSERT INTO operators (run, name, position, class, kind, params, inputs, "
                "supported_modes, strategies, parallelism, code) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (rid, name, position, cls, kind, json.dumps(params, default=str),
                 json.dumps(inputs), json.dumps(supported_modes), json.dumps(strategies),
                 parallelism, None if code is None else json.dumps(code)),
            )

    def set_manifest(self, rid: str, digest: str, code: Mapping[str, dict[str, Any]]
                     ) -> None:
        """Record run ``rid``'s manifest digest and its operators' code (``subzero
        migrate``: a run recorded before manifests existed)."""
        with self.tx() as db:
            db.execute("UPDATE runs SET manifest = ? WHERE id = ?", (digest, rid))
            db.executemany("UPDATE operators SET code = ? WHERE run = ? AND name = ?",
                           [(json.dumps(c), rid, n) for n, c in code.items()])

    def set_operator_strategies(self, rid: str, name: str, strategies: list[str]) -> None:
        """Set the lineage strategies operator ``name`` of run ``rid`` records."""
        with self.tx() as db:
            db.execute("UPDATE operators SET strategies = ? WHERE run = ? AND name = ?",
                       (json.dumps(strategies), rid, name))

    def operators(self, rid: str) -> dict[str, dict[str, Any]]:
        """The operators of run ``rid`` by name, in workflow order, JSON columns
        decoded."""
        out = {}
        for r in self.db.execute("SELECT * FROM operators WHERE run = ? ORDER BY position", (rid,)):
            d = dict(r)
            for k in ("params", "inputs", "supported_modes", "strategies"):
                d[k] = json.loads(d[k])
            d["code"] = loads(d.get("code"))
            out[d["name"]] = d
        return out
