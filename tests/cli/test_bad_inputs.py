"""A new user's bad inputs, over every command: each is refused with exit 2 and exactly one
line on stderr (``subzero: error: ...``) naming the bad value and what was expected;
nothing is accepted silently, no traceback and no library warning reaches the terminal.

Each case is ``(argv, expected exit, a word the message must contain)``. ``{H}`` is a home
with two runs (r1: ``example`` with ``full-one``, which stores no lineage there; r2:
``astronomy`` with ``subzero``), ``{F}`` a folder of bad files, ``{T}`` a writable folder.
Runs that should fail must do so before Spark is asked for (a guard fails the case if
they get that far), so no case runs a workflow.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

import subzero.engine.runner as runner
from operators import UDF
from subzero.cli import main
from tests.conftest import SHARED_DATA

LSST = SHARED_DATA / "lsst" / "imsim_85408556_R23_S11_C04_E000.fits"
TABLE = SHARED_DATA / "medulloblastoma" / "MD_train_set.txt"
Q1 = ["query", "r1", "backward", "--from", "bright"]          # example, stores nothing
Q2 = ["query", "r2", "backward", "--from", "clust"]           # astronomy, stores some
IMG = ["--cells", "1,1", "--to", "image"]
OPT = ["optimize", "--workflow", "example", "--param", "shape=40x30", "--max-disk", "1MB"]

CASES = [
    # the command line itself
    ([], 2, "no command"),
    (["frobnicate"], 2, "invalid choice"),
    (["--json"], 2, "unrecognized"),
    (["workflows", "extra"], 2, "unrecognized"),
    (["workflows", "--bogus"], 2, "unrecognized"),
    # run: workflows, strategies and parameters
    (["run"], 2, "required"),
    (["run", "nope"], 2, "unknown workflow"),
    (["run", ""], 2, "expected a workflow"),
    (["run", "../no/such.py"], 2, "no such file"),
    (["run", "example:nope"], 2, "has no 'nope'"),
    (["run", "example", "--param", "colour=red"], 2, "accepted: "),
    (["run", "example", "--strategy", "fast"], 2, "unknown strategy"),
    (["run", "example", "--strategy", ""], 2, "expected a value"),
    (["run", "example", "--param", "shape=3"], 2, "shape"),
    (["run", "example", "--param", "shape=0x5"], 2, "shape"),
    (["run", "example", "--param", "shape=-5x5"], 2, "shape"),
    (["run", "example", "--param", "shape=axb"], 2, "shape"),
    (["run", "example", "--param", "shape=99999999999999999999x2"], 2, "shape"),
    (["run", "example", "--param", "shape=10000000x10000000"], 2, "would store"),
    (["run", "example", "--param", "seed=xyz"], 2, "seed"),
    (["run", "example", "--param", "seed=-1"], 2, "seed"),
    (["run", "example", "--param", "seed=1.5"], 2, "seed"),
    (["run", "example", "--param", "seed=99999999999999999999999"], 2, "seed"),
    (["run", "example", "--param", "threshold=abc"], 2, "threshold"),
    (["run", "example", "--param", "threshold=nan"], 2, "threshold"),
    (["run", "example", "--param", "threshold=inf"], 2, "threshold"),
    (["run", "example", "--param", "colour=red"], 2, "no parameter"),
    (["run", "example", "--param", "=5"], 2, "NAME=VALUE"),
    (["run", "example", "--param", "shape"], 2, "NAME=VALUE"),
    (["run", "example", "--scale", "3"], 2, "no parameter"),
    (["run", "astronomy", "--param", "seed=x"], 2, "seed"),
    (["run", "astronomy", "--param", "seed=-3"], 2, "seed"),
    (["run", "astronomy", "--param", "sky=x"], 2, "sky"),
    (["run", "astronomy", "--param", "sky=nan"], 2, "sky"),
    (["run", "astronomy", "--param", "threshold=x"], 2, "threshold"),
    (["run", "astronomy", "--param", "threshold=inf"], 2, "threshold"),
    (["run", "astronomy", "--param", "ccds=0"], 2, "ccds"),
    (["run", "astronomy", "--param", "ccds=x"], 2, "ccds"),
    (["run", "astronomy", "--param", "ccds=2000"], 2, "ccds"),
    (["run", "astronomy", "--param", "ccds=1.5"], 2, "ccds"),
    (["run", "astronomy", "--param", "mask=xor"], 2, "mask"),
    (["run", "astronomy", "--param", "data=sometimes"], 2, "data"),
    (["run", "astronomy", "--param", "shape=4x4"], 2, "shape"),
    (["run", "astronomy", "--param", "shape=8x8x8"], 2, "shape"),
    (["run", "astronomy", "--param", "shape=100000000x100000000"], 2, "would store"),
    (["run", "genomics", "--scale", "0"], 2, "scale"),
    (["run", "genomics", "--scale", "-3"], 2, "scale"),
    (["run", "genomics", "--scale", "abc"], 2, "invalid int"),
    (["run", "genomics", "--scale", "100000000000"], 2, "scale"),
    (["run", "genomics", "--param", "scale=abc"], 2, "scale"),
    (["run", "genomics", "--param", "scale=0"], 2, "scale"),
    (["run", "genomics", "--param", "seed=x"], 2, "seed"),
    (["run", "genomics", "--param", "seed=-1"], 2, "seed"),
    (["run", "genomics", "--param", "patients=0"], 2, "patients"),
    (["run", "genomics", "--param", "patients=x"], 2, "patients"),
    (["run", "genomics", "--param", "colour=1"], 2, "no parameter"),
    # run: input files
    (["run", "example", "--input", "image"], 2, "NAME=VALUE"),
    (["run", "example", "--input", "sky=/x.npy"], 2, "no input 'sky'"),
    (["run", "example", "--input", "image=/no/such.npy"], 2, "does not exist"),
    (["run", "example", "--input", "image={F}/adir"], 2, "directory"),
    (["run", "example", "--input", "image=/dev/null"], 2, "not a regular file"),
    (["run", "example", "--input", "image={F}/empty.npy"], 2, "empty"),
    (["run", "example", "--input", "image={F}/obj.npy"], 2, "objects"),
    (["run", "example", "--input", "image={F}/str.npy"], 2, "str.npy"),
    (["run", "example", "--input", "image={F}/f3d.npy"], 2, "shape"),
    (["run", "example", "--input", "image={F}/small.npy"], 2, "shape"),
    (["run", "example", "--input", "image={F}/notnpy.npy"], 2, "cannot read"),
    (["run", "example", "--input", "image={F}/archive.npy"], 2, "npz"),
    (["run", "example", "--input", "image={F}/img.txt"], 2, ".npy or .fits"),
    (["run", "example", "--input", "image={F}/text.fits"], 2, "FITS"),
    (["run", "example", "--input", "image={F}/empty.fits"], 2, "empty"),
    (["run", "astronomy", "--input", "exp1={F}/trunc.fits", "--input",
      "exp2={F}/trunc.fits"], 2, "truncated"),
    (["run", "astronomy", "--input", "exp1={F}/text.fits", "--input",
      "exp2={F}/text.fits"], 2, "FITS"),
    (["run", "astronomy", "--input", "exp1={F}/adir", "--input", "exp2={F}/adir"], 2,
     "directory"),
    (["run", "astronomy", "--input", "exp1={F}/trunc.fits"], 2, "exp2"),
    (["run", "astronomy", "--input", "sky={F}/trunc.fits"], 2, "sky"),
    (["run", "genomics", "--input", "table={F}/nolabel.tsv"], 2, "RELAPSE"),
    (["run", "genomics", "--input", "table={F}/badlabel.tsv"], 2, "RELAPSE"),
    (["run", "genomics", "--input", "table={F}/garbled.tsv"], 2, "expected one of"),
    (["run", "genomics", "--input", "table={F}/empty.tsv"], 2, "empty"),
    (["run", "genomics", "--input", "table={F}/adir"], 2, "table"),
    (["run", "genomics", "--input", "table={F}/bin.json"], 2, "cannot read"),
    (["run", "genomics", "--input", "table={F}/ragged.tsv"], 2, "fields"),
    (["run", "genomics", "--input", "table={F}/noheader.tsv"], 2, "header"),
    (["run", "genomics", "--input", "other={F}/ragged.tsv"], 2, "no input"),
    # run: plans, budgets, chunks, master, home
    (["run", "example", "--plan", "/no/plan.json"], 2, "no such file"),
    (["run", "example", "--plan", "{F}/bin.json"], 2, "not a text file"),
    (["run", "example", "--plan", "{F}/adir"], 2, "folder"),
    (["run", "example", "--plan", "{F}/emptyplan.json"], 2, "lists no operator"),
    (["run", "example", "--plan", "{F}/listplan.json"], 2, "expected"),
    (["run", "example", "--plan", "{F}/plan_bad_op.json"], 2, "not in workflow"),
    (["run", "example", "--plan", "{F}/plan_empty_list.json"], 2, "empty strategy list"),
    (["run", "example", "--plan", "{F}/plan_bad_strategy.json"], 2, "warp"),
    (["run", "example", "--plan", "{F}/badjson.json"], 2, "not valid JSON"),
    (["run", "example", "--plan", "{F}/plan_bad_budget.json"], 2, "max_disk"),
    (["run", "example", "--plan", ""], 2, "expected a value"),
    (["run", "example", "--max-disk", "-5"], 2, "--max-disk"),
    (["run", "example", "--max-disk", ""], 2, "expected a value"),
    (["run", "example", "--max-disk", "abc"], 2, "--max-disk"),
    (["run", "example", "--max-disk", "5XB"], 2, "--max-disk"),
    (["run", "example", "--chunks", "a,b"], 2, "chunking"),
    (["run", "example", "--chunks", "2x2x2"], 2, "axes"),
    (["run", "example", "--chunks", "4,4,4"], 2, "axes"),
    (["run", "example", "--chunks", "0"], 2, "positive"),
    (["run", "example", "--chunks", "-2"], 2, "positive"),
    (["run", "example", "--chunks", "0,5"], 2, "positive"),
    (["run", "example", "--chunks", ""], 2, "expected a value"),
    (["run", "example", "--chunks", "9999999999999999999999999"], 2, "at most 100,000 chunks"),
    (["run", "example", "--chunks", "100", "--max-chunks", "5000"], 2, "at most 5,000"),
    (["run", "example", "--param", "shape=40x30", "--chunks", "9999999999999999999999999"],
     2, "--force"),
    (["run", "example", "--chunks", "300"], 2, "64 KiB"),
    (["run", "example", "--chunks", "2", "--max-chunks", "0"], 2, "--max-chunks 0"),
    (["run", "example", "--max-chunks", "-3"], 2, "--max-chunks -3"),
    (["run", "example", "--master", ""], 2, "expected a value"),
    (["run", "example", "--master", "bogus"], 2, "master"),
    (["run", "example", "--master", "local[0]"], 2, "master"),
    (["run", "example", "--master", "spark://"], 2, "master"),
    (["run", "example", "--home", "{F}/homefile"], 2, "is a file"),
    (["run", "example", "--home", "{F}/homefile/sub"], 2, "home"),
    (["run", "example", "--home", ""], 2, "--home ''"),
    (["run", "example", "--home", "{F}/loop"], 2, "symlink loop"),
    (["run", "example", "--plan", "{F}/deep.json"], 2, "levels deep"),
    (["run", "example", "--input", "image="], 2, "expected a file path for input 'image'"),
    (["run", "astronomy", "--input", "exp1=", "--input", "exp2={F}/adir"], 2, "'exp1'"),
    # runs, show
    (["runs", "--bogus"], 2, "unrecognized"),
    (["runs", "extra"], 2, "unrecognized"),
    (["runs", "--home", "{F}/homefile"], 2, "is a file"),
    (["runs", "--home", "{F}/nowhere"], 2, "no SubZero home"),
    (["runs", "--home", "{F}/badhome"], 2, "catalog"),
    (["runs", "--home", ""], 2, "--home ''"),
    (["runs", "--home", "{F}/loop"], 2, "symlink loop"),
    (["show", "r1", "--home", "{F}/loop/sub"], 2, "symlink loop"),
    (["show"], 2, "required"),
    (["show", "r99"], 2, "unknown run"),
    (["show", ""], 2, "unknown run"),
    (["show", "latest:nope"], 2, "no complete run"),
    (["show", "r1", "--home", "{F}/homefile"], 2, "is a file"),
    (["show", "r1", "--home", "{F}/badhome"], 2, "catalog"),
    # export
    (["export", "r1", "image"], 2, "required"),
    (["export", "r99", "image", "{T}/x.npy"], 2, "unknown run"),
    (["export", "r1", "nope", "{T}/x.npy"], 2, "no array"),
    (["export", "latest:nope", "image", "{T}/x.npy"], 2, "no complete run"),
    (["export", "r1", "image", "{T}/x.png"], 2, "unsupported"),
    (["export", "r1", "image", "{T}/x"], 2, "unsupported"),
    (["export", "r1", "image", "{T}/missing/dir/x.npy"], 2, "does not exist"),
    (["export", "r1", "image", "{F}/dir.npy"], 2, "folder"),
    (["export", "r1", "image", "{F}/homefile/x.npy"], 2, "not a folder"),
    (["export", "r1", "image", ""], 2, "expected a file name"),
    (["export", "r1", "image", "{T}/x.npy", "--home", "{F}/homefile"], 2, "is a file"),
    # query: what, from where, to where
    (["query"], 2, "required"),
    (["query", "r1"], 2, "direction"),
    (["query", "r1", "sideways"], 2, "invalid choice"),
    (["query", "r99", "backward", "--from", "bright", *IMG], 2, "unknown run"),
    (["query", "r1", "backward", *IMG], 2, "--from"),
    (["query", "r1", "backward", "--from", "nope", *IMG], 2, "no array"),
    (["query", "r1", "backward", "--from", "", *IMG], 2, "expected a value"),
    ([*Q1, "--to", "image"], 2, "exactly one of --cells"),
    ([*Q1, "--cells", "1,1", "--box", "0:2,0:2", "--to", "image"], 2, "exactly one of"),
    ([*Q1, "--cells", "", "--to", "image"], 2, "expected a value"),
    ([*Q1, "--cells", "1", "--to", "image"], 2, "coordinates"),
    ([*Q1, "--cells", "1,2,3", "--to", "image"], 2, "coordinates"),
    ([*Q1, "--cells", "a,b", "--to", "image"], 2, "bad cell"),
    ([*Q1, "--cells", "-1,2", "--to", "image"], 2, "-1"),
    ([*Q1, "--cells", "99999,1", "--to", "image"], 2, "99999"),
    ([*Q1, "--cells", "99999999999999999999999,1", "--to", "image"], 2, "out of range"),
    ([*Q1, "--box", "-3:4,0:2", "--to", "image"], 2, "-3:4"),
    ([*Q1, "--box", "0:2", "--to", "image"], 2, "box"),
    ([*Q1, "--box", "5:2,0:2", "--to", "image"], 2, "box"),
    ([*Q1, "--box", "a:b,0:2", "--to", "image"], 2, "box"),
    ([*Q1, "--box", "0:99999999999999999999999,0:2", "--to", "image"], 2, "outside"),
    ([*Q1, "--box", "", "--to", "image"], 2, "expected a value"),
    ([*Q1, "--cells-file", "/no.npy", "--to", "image"], 2, "no such file"),
    ([*Q1, "--cells-file", "{F}/obj.npy", "--to", "image"], 2, ".npy"),
    ([*Q1, "--cells-file", "{F}/empty.npy", "--to", "image"], 2, "empty"),
    ([*Q1, "--cells-file", "{F}/adir", "--to", "image"], 2, "folder"),
    ([*Q1, "--cells-file", "{F}/notnpy.npy", "--to", "image"], 2, ".npy"),
    ([*Q1, "--cells-file", "{F}/str.npy", "--to", "image"], 2, "cells"),
    ([*Q1, "--cells-file", "{F}/f3d.npy", "--to", "image"], 2, "cells"),
    ([*Q1, "--cells", "1,1", "--to", "nope"], 2, "no array"),
    ([*Q1, "--cells", "1,1", "--to", ""], 2, "expected a value"),
    ([*Q1, "--cells", "1,1", "--to", "image", "--path", "bright:0"], 2, "exactly one of"),
    ([*Q1, "--cells", "1,1", "--path", ""], 2, "expected a value"),
    ([*Q1, "--cells", "1,1", "--path", "bright"], 2, "op:index"),
    ([*Q1, "--cells", "1,1", "--path", "bright:x"], 2, "op:index"),
    ([*Q1, "--cells", "1,1", "--path", "nope:0"], 2, "nope"),
    ([*Q1, "--cells", "1,1", "--path", "bright:5"], 2, "bright"),
    ([*Q1, "--cells", "1,1", "--path", "smooth:0"], 2, "smooth"),
    (["query", "r1", "forward", "--from", "bright", *IMG[:2], "--to", "image"], 2, "image"),
    ([*Q1, *IMG, "--method", "fast"], 2, "invalid choice"),
    ([*Q1, *IMG, "--method", "stored"], 2, "stores no lineage"),
    (["query", "r2", "--named", "BQ9"], 2, "BQ9"),
    (["query", "r2", "--named", "BQ0", "--cells", "1,1"], 2, "--named takes no"),
    (["query", "r2", "--named", ""], 2, "expected a value"),
    (["query", "r1", "--named", "BQ0"], 2, "BQ0"),
    ([*Q1, *IMG, "--out", "{T}/missing/x.npy"], 2, "does not exist"),
    ([*Q1, *IMG, "--out", "{T}/x.txt"], 2, "unsupported"),
    ([*Q1, *IMG, "--out", "{F}/dir.npy"], 2, "folder"),
    ([*Q1, *IMG, "--out", "{F}/homefile/x.npy"], 2, "not a folder"),
    ([*Q1, *IMG, "--png", "{T}/missing/x.png"], 2, "does not exist"),
    ([*Q1, *IMG, "--png", "{T}/x.bmpx"], 2, "unsupported"),
    ([*Q1, *IMG, "--png", "{T}/x"], 2, "unsupported"),
    ([*Q1, *IMG, "--png", "{F}/dir.png"], 2, "folder"),
    ([*Q1, *IMG, "--png", "{F}/homefile/x.png"], 2, "not a folder"),
    ([*Q1, *IMG, "--home", "{F}/homefile"], 2, "is a file"),
    ([*Q2, "--cells", "10,10", "--to", "exp1", "--method", "bogus"], 2, "invalid choice"),
    # the direction after an option is the direction
    (["query", "r1", "--method", "stored", "backward", "--from", "bright", *IMG], 2,
     "stores no lineage"),
    (["query", "r1", "--method", "map", "sideways", "--from", "bright", *IMG], 2,
     "invalid choice"),
    (["query", "r1", "--method", "map", "backward", "forward", "--from", "bright", *IMG], 2,
     "unrecognized arguments: forward"),
    # replay: a value that starts with a minus is a value
    (["replay", "r1", "--from", "image", "--cells", "1,1", "--set", "-inf"], 2, "'-inf'"),
    (["replay", "r1", "--from", "image", "--cells", "1,1", "--set", "-NaN"], 2, "'-NaN'"),
    (["replay", "r1", "--from", "image", "--cells", "1,1", "--set", "-5"], 2, "0 to 65535"),
    (["replay", "r1", "--from", "bright", "--cells", "1,1", "--set", "-1e5"], 2, "bool"),
    # check-lineage: parameters asking for more than the input or the memory holds
    (["check-lineage", "MedianFilter", "--param", "radius=100000000"], 2,
     "radius 100000000 on axis 0 of an input of shape (24, 20); expected a radius of at "
     "most 24"),
    (["check-lineage", "MedianFilter", "--param", "radius=[1, 21]"], 2, "at most 20"),
    (["check-lineage", "tests.cli.test_bad_inputs:Greedy", "--param", "scratch=100000"], 2,
     "scratch=100000 ran out of memory"),
    (["check-lineage", "MedianFilter", "--param", "radius=" + "[" * 5000 + "]" * 5000], 2,
     "--param radius"),
    # rm and gc (every case is refused: the corpus' runs are never removed)
    (["rm"], 2, "required"),
    (["rm", "r99"], 2, "unknown run"),
    (["rm", "latest:nope"], 2, "no complete run"),
    (["rm", "r1", "--home", "{F}/nowhere"], 2, "no SubZero home"),
    (["rm", "r1", "--home", "{F}/homefile"], 2, "is a file"),
    (["rm", "r1", "--home", "{F}/badhome"], 2, "catalog"),
    (["gc", "--older-than", "30x"], 2, "--older-than"),
    (["gc", "--older-than", "-3d"], 2, "--older-than"),
    (["gc", "--keep-last", "-1"], 2, "--keep-last"),
    (["gc", "--keep-last", "two"], 2, "--keep-last"),
    (["gc", "--failed", "--home", "{F}/nowhere"], 2, "no SubZero home"),
    # migrate
    (["migrate", "{T}/nohome"], 2, "no SubZero home"),
    # optimize
    (["optimize"], 2, "required"),
    (["optimize", "--max-disk", "1MB"], 2, "exactly one of"),
    (["optimize", "--workflow", "nope", "--max-disk", "1MB"], 2, "unknown workflow"),
    (["optimize", "--workflow", "example", "--run", "r1", "--max-disk", "1MB"], 2,
     "exactly one of"),
    (["optimize", "--workflow", "example", "--max-disk", "abc"], 2, "--max-disk"),
    (["optimize", "--workflow", "example", "--max-disk", "-5"], 2, "--max-disk"),
    (["optimize", "--workflow", "example", "--max-disk", ""], 2, "--max-disk"),
    ([*OPT, "--max-runtime", "abc"], 2, "--max-runtime"),
    ([*OPT, "--max-runtime", "-2"], 2, "--max-runtime"),
    ([*OPT, "--max-runtime", "nan"], 2, "--max-runtime"),
    ([*OPT, "--pin", "calibrate"], 2, "OPERATOR=STRATEGY"),
    ([*OPT, "--pin", "nope=full-one-bwd"], 2, "nope"),
    ([*OPT, "--pin", "calibrate=warp"], 2, "warp"),
    ([*OPT, "--workload", "/no/such.json"], 2, "workload"),
    ([*OPT, "--workload", "{F}/bin.json"], 2, "workload"),
    ([*OPT, "--workload", "{F}/adir"], 2, "workload"),
    ([*OPT, "--workload", "{F}/listplan.json"], 2, "workload"),
    ([*OPT, "--workload", "{F}/nanweight.json"], 2, "query 2: weight must be a finite"),
    ([*OPT, "--workload", "{F}/nanweight.json", "--json"], 2, "Got nan"),
    ([*OPT, "--workload", "{F}/infweight.json"], 2, "Got inf"),
    ([*OPT, "--workload", "{F}/negweight.json"], 2, "Got -2"),
    ([*OPT, "--workload", "{F}/nancells.json"], 2, "'cells' must be a finite count"),
    ([*OPT, "--workload", "{F}/deep.json"], 2, "nested 100,000 levels deep"),
    ([*OPT, "--calibration", "{F}/deep.json"], 2, "levels deep"),
    ([*OPT, "--calibration", "/no/cal.json"], 2, "calibration"),
    ([*OPT, "--calibration", "{F}/bin.json"], 2, "calibration"),
    ([*OPT, "--out", "{T}/missing/p.json"], 2, "does not exist"),
    ([*OPT, "--out", "{T}/p.txt"], 2, "unsupported"),
    ([*OPT, "--out", "{F}/dir.json"], 2, "folder"),
    (["optimize", "--run", "r99", "--max-disk", "1MB"], 2, "unknown run"),
    (["optimize", "--run", "r1", "--param", "seed=1", "--max-disk", "1MB"], 2, "--param"),
    (["optimize", "--workflow", "example", "--param", "seed=x", "--max-disk", "1MB"], 2,
     "seed"),
    # calibrate, bench
    (["calibrate", "--out", "{T}/missing/c.json"], 2, "does not exist"),
    (["calibrate", "--out", "{T}/c.txt"], 2, "unsupported"),
    (["calibrate", "--out", "{F}/dir.json"], 2, "folder"),
    (["calibrate", "--bogus"], 2, "unrecognized"),
    (["bench"], 2, "required"),
    (["bench", "nope"], 2, "invalid choice"),
    (["bench", "query", "--out", "{T}/missing/x.json"], 2, "does not exist"),
    (["bench", "query", "--out", "{F}/dir.json"], 2, "folder"),
    (["bench", "query", "--png", "{F}/homefile"], 2, "not a folder"),
    # verify
    (["verify"], 2, "required"),
    (["verify", "r99"], 2, "unknown run"),
    (["verify", "latest:nope"], 2, "no complete run"),
    (["verify", "r1", "--home", "{F}/nowhere"], 2, "no SubZero home"),
    (["verify", "r1", "--home", "{F}/homefile"], 2, "is a file"),
]


class Greedy(UDF):
    """A user's operator whose kernel wants a scratch cube of side ``scratch``: more memory
    than any machine has when ``scratch`` is large (``check-lineage`` names it)."""

    n_inputs = 1

    def __init__(self, scratch=1):
        self.scratch = int(scratch)

    def params(self):
        return {"scratch": self.scratch}

    def run(self, ctx, x):
        np.empty((self.scratch,) * 3)
        return x.copy()


def _bad_files(d):
    """Every kind of bad file a case names, in ``d``."""
    d.mkdir()
    (d / "adir").mkdir()
    (d / "dir.npy").mkdir()
    (d / "dir.png").mkdir()
    (d / "dir.json").mkdir()
    (d / "empty.npy").write_bytes(b"")
    (d / "empty.fits").write_bytes(b"")
    (d / "empty.tsv").write_bytes(b"")
    np.save(d / "obj.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    np.save(d / "str.npy", np.array([["a", "b"]]))
    np.save(d / "f3d.npy", np.zeros((2, 2, 2)))
    np.save(d / "small.npy", np.zeros((5, 5), np.uint16))
    np.savez(d / "archive.npz", a=np.zeros(3))
    (d / "archive.npz").rename(d / "archive.npy")
    (d / "notnpy.npy").write_text("hello, not an array")
    (d / "img.txt").write_text("1 2 3")
    (d / "text.fits").write_text("hello, not FITS")
    (d / "bin.json").write_bytes(bytes(range(256)))
    (d / "badjson.json").write_text("{plan: ")
    (d / "homefile").write_text("not a folder")
    (d / "badhome").mkdir()
    (d / "badhome" / "catalog.sqlite").write_bytes(b"garbage, not SQLite " * 100)
    for name, doc in {"emptyplan.json": {}, "listplan.json": [],
                      "plan_bad_op.json": {"nope": ["map"]},
                      "plan_empty_list.json": {"plan": {"calibrate": []}},
                      "plan_bad_strategy.json": {"calibrate": ["warp"]},
                      "plan_bad_budget.json": {"plan": {"calibrate": ["map"]},
                                               "max_disk": "lots"}}.items():
        (d / name).write_text(json.dumps(doc))
    query = {"direction": "backward", "from": "bright", "to": "image"}
    for name, bad in {"nanweight.json": {"weight": float("nan")},
                      "infweight.json": {"weight": float("inf")},
                      "negweight.json": {"weight": -2}, "nancells.json": {"cells": float("nan")}
                      }.items():  # the second query is bad (Python writes NaN, Infinity)
        (d / name).write_text(json.dumps({"queries": [query, {**query, **bad}]}))
    (d / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (d / "loop").symlink_to(d / "loop2")  # a symlink loop
    (d / "loop2").symlink_to(d / "loop")
    if LSST.exists():
        (d / "trunc.fits").write_bytes(LSST.read_bytes()[:100_000])
    lines = (TABLE.read_text().splitlines() if TABLE.exists() else [])
    if lines:
        (d / "nolabel.tsv").write_text("\n".join(x for x in lines if not x.startswith("RELAPSE")))
        cut = [x.split("\t") for x in lines]
        (d / "badlabel.tsv").write_text("\n".join(
            "\t".join(r[:4] + ["maybe"] * (len(r) - 4)) if r[0] == "RELAPSE" else "\t".join(r)
            for r in cut))
        (d / "garbled.tsv").write_text("\n".join(
            "\t".join(r[:4] + ["#@!"] * (len(r) - 4)) if k > 1 else "\t".join(r)
            for k, r in enumerate(cut)))
        (d / "ragged.tsv").write_text("\n".join(lines[:3] + ["HISTO\tx"]))
        (d / "noheader.tsv").write_text("\n".join(lines[1:]))
    return d


@pytest.fixture(scope="module")
def corpus(spark, tmp_path_factory):
    """A home with r1 (example, full-one: no lineage stored) and r2 (astronomy, subzero)."""
    root = tmp_path_factory.mktemp("bad-inputs")
    home = root / "home"
    from subzero.api import Home

    Home(home).run("example", strategy="full-one", shape="40x30", quiet=True)
    Home(home).run("astronomy", strategy="subzero", shape="64x48", quiet=True)
    files = _bad_files(root / "files")
    out = root / "out"
    out.mkdir()
    return {"H": str(home), "F": str(files), "T": str(out)}


def _no_spark(*args, **kwargs):
    raise AssertionError("a bad input got as far as starting Spark")


def run_case(argv, corpus, capsys, monkeypatch):
    monkeypatch.setattr(runner, "get_spark", _no_spark)
    args = [a.format(**corpus) for a in argv]
    if args and args[0] not in ("workflows", "bench", "frobnicate", "--json") and (
            "--home" not in args):
        args += ["--home", corpus["H"]]
    capsys.readouterr()
    code = main(args)
    return code, capsys.readouterr()


@pytest.mark.parametrize("argv, code, word", CASES,
                         ids=[" ".join(c[0])[:70] or "(nothing)" for c in CASES])
def test_bad_input_is_one_line_naming_it(argv, code, word, corpus, capsys, monkeypatch):
    if any("trunc.fits" in a for a in argv) and not LSST.exists():
        pytest.skip("needs the LSST exposure to cut")
    if any(a.endswith(".tsv") for a in argv) and not TABLE.exists():
        pytest.skip("needs the medulloblastoma table to garble")
    got, out = run_case(argv, corpus, capsys, monkeypatch)
    lines = out.err.strip().splitlines()
    assert got == code, out.err
    assert len(lines) == 1, out.err
    assert lines[0].startswith("subzero: error: "), out.err
    assert word.lower() in lines[0].lower(), lines[0]


def test_corpus_is_large_and_covers_every_command():
    commands = {c[0][0] for c in CASES if c[0]}
    from subzero.cli.main import _command_names, build_parser

    # other engineers' commands (their own suites test their inputs)
    mine = set(_command_names(build_parser())) - {"check-lineage", "replay", "serve"}
    assert mine <= commands, mine - commands
    assert len(CASES) >= 200


def _make_read_only(path):
    """``path`` made read-only for this process (root ignores modes: then immutable), or
    None when neither works here."""
    os.chmod(path, 0o555)
    probe = path / ".probe"
    try:
        probe.touch()
    except OSError:
        return "chmod"
    probe.unlink()
    if shutil.which("chattr") and subprocess.run(["chattr", "+i", str(path)],
                                                 capture_output=True).returncode == 0:
        return "chattr"
    os.chmod(path, 0o755)
    return None


def _undo_read_only(path, how):
    if how == "chattr":
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)
    os.chmod(path, 0o755)


def _run_read_only(argv, corpus, capsys, monkeypatch, tmp_path):
    """``argv`` run with ``{RO}`` a read-only folder holding ``home``, a copy of the
    corpus' home made read-only too (skipped where no folder can be made read-only)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    home = ro / "home"
    shutil.copytree(corpus["H"], home)  # a home with runs, then made read-only
    (home / "catalog.sqlite-wal").unlink(missing_ok=True)
    (home / "catalog.sqlite-shm").unlink(missing_ok=True)
    hows = [(p, _make_read_only(p)) for p in (home, ro)]
    try:
        if any(h is None for _, h in hows):
            pytest.skip("cannot make a folder read-only here")
        return run_case([a.replace("{RO}", str(ro)) for a in argv], corpus, capsys,
                        monkeypatch)
    finally:
        for p, how in reversed(hows):
            if how:
                _undo_read_only(p, how)


@pytest.mark.parametrize("argv, word", [
    (["run", "example", "--param", "shape=40x30", "--home", "{RO}/home"], "not writable"),
    (["export", "r1", "image", "{RO}/x.npy"], "read-only"),
    ([*Q1, *IMG, "--out", "{RO}/x.npy"], "read-only"),
    ([*Q1, *IMG, "--png", "{RO}/x.png"], "read-only"),
    ([*OPT, "--out", "{RO}/p.json"], "read-only"),
    (["calibrate", "--out", "{RO}/c.json"], "read-only"),
])
def test_read_only_home_or_output_is_one_line(argv, word, corpus, capsys, monkeypatch,
                                              tmp_path):
    got, out = _run_read_only(argv, corpus, capsys, monkeypatch, tmp_path)
    lines = out.err.strip().splitlines()
    assert got == 2 and len(lines) == 1, out.err
    assert word in lines[0], lines[0]


@pytest.mark.parametrize("argv", [
    ["runs", "--home", "{RO}/home"],
    ["show", "r1", "--home", "{RO}/home"],
    [*Q1, *IMG, "--home", "{RO}/home"],
    ["export", "r1", "image", "{T}/x.npy", "--home", "{RO}/home"],
    ["verify", "r1", "--home", "{RO}/home"],
])
def test_reading_commands_answer_on_a_read_only_home(argv, corpus, capsys, monkeypatch,
                                                     tmp_path):
    """A home this user cannot write (made read-only here; tests/engine/test_readers_never_write.py
    mounts one read-only) answers every reading command."""
    got, out = _run_read_only(argv, corpus, capsys, monkeypatch, tmp_path)
    assert got == 0, out.err


def test_a_garbage_catalog_is_damaged_for_verify(corpus, capsys, monkeypatch):
    got, out = run_case(["verify", "r1", "--home", "{F}/badhome"], corpus, capsys,
                        monkeypatch)
    assert got == 3 and "damaged" in out.out, out.out + out.err


def test_truncated_fits_warning_never_reaches_the_terminal(corpus, tmp_path):
    """In a subprocess, as a user sees it: astropy's truncation warning is not printed."""
    if not LSST.exists():
        pytest.skip("needs the LSST exposure to cut")
    from tests.conftest import run_cli

    f = f"{corpus['F']}/trunc.fits"
    p = run_cli("run", "astronomy", "--input", f"exp1={f}", "--input", f"exp2={f}",
                "--home", str(tmp_path / "h"))
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [p.stderr.strip()], p.stderr
    assert "truncated" in p.stderr and "WARNING" not in p.stderr


def test_no_bad_run_leaves_anything_behind(corpus):
    """The bad runs above were all refused before a run was created: the home still holds
    exactly its two runs."""
    from subzero.api import Home

    assert [r["id"] for r in Home(corpus["H"]).runs()] == ["r1", "r2"]
    assert sorted(os.listdir(os.path.join(corpus["H"], "runs"))) == ["r1", "r2"]


def test_the_direction_may_follow_options(corpus, capsys):
    """``query r1 --method map backward ...`` is the query with the direction first."""
    tail = ["--from", "bright", *IMG, "--home", corpus["H"], "--json"]
    docs = []
    for argv in (["query", "r1", "backward", "--method", "map", *tail],
                 ["query", "r1", "--method", "map", "backward", *tail],
                 ["query", "--method", "map", "r1", *tail[:2], "backward", *tail[2:]]):
        capsys.readouterr()
        assert main(argv) == 0, capsys.readouterr().err
        docs.append(json.loads(capsys.readouterr().out))
    assert len({(d["direction"], d["count"]) for d in docs}) == 1
    assert docs[0]["direction"] == "backward" and docs[0]["count"] > 0


@pytest.mark.parametrize("value", ["-inf", "-Infinity", "-nan", "-5", "-1e5", "-.5", "inf"])
def test_set_takes_a_value_that_starts_with_a_minus(value):
    from subzero.cli.main import build_parser

    args = build_parser(["replay"]).parse_args(["replay", "r1", "--from", "x", "--set", value])
    assert args.set == value


def _strict(text):
    """JSON parsed by a strict reader (NaN and Infinity are not JSON)."""
    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def test_json_output_is_strict_json(corpus, capsys):
    """``--json`` never prints NaN or Infinity: a figure that is not finite is null."""
    from subzero.cli.common import emit_json

    emit_json({"cost": float("nan"), "p": [np.float32("inf"), 1.5], "a": np.array([np.nan])})
    assert _strict(capsys.readouterr().out) == {"cost": None, "p": [None, 1.5], "a": [None]}
    assert main([*OPT, "--max-runtime", "inf", "--home", corpus["H"], "--json"]) == 0
    doc = _strict(capsys.readouterr().out)
    assert doc["max_runtime"] is None and doc["workflow"] == "example"


def test_an_input_made_whole_that_cannot_fit_in_memory_is_refused(tmp_path):
    """A whole-array input source (made on the driver) larger than the machine's memory is
    refused before anything runs, naming the input; the same shape made box by box is not
    held whole, so only the disk check applies to it."""
    from operators import Cast
    from subzero.engine.capacity import check_fits, physical_memory
    from subzero.errors import SubZeroError
    from subzero.workflow import Workflow

    side = int((physical_memory() / 16) ** 0.5) + 1  # 32 bytes a cell: twice the memory
    wf = Workflow("big")
    wf.input("x", (side, side), "uint8", source=lambda: np.zeros((side, side), np.uint8))
    wf.add("y", Cast("uint8"), "x")
    with pytest.raises(SubZeroError, match="input 'x' is made whole in the driver's memory"):
        check_fits(wf.validate(), tmp_path)
    wf = Workflow("big")
    wf.input("x", (side, side), "uint8", blocks=lambda box: np.zeros(box.shape, np.uint8))
    wf.add("y", Cast("uint8"), "x")
    try:
        check_fits(wf.validate(), tmp_path)
    except SubZeroError as e:
        assert "would store" in str(e)  # only the disk can refuse it
