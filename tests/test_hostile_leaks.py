"""Planted private values (issue 35, item 2): a unique value is planted where the data are
private (a label outside the declared domain, a privacy-unit id, a coordinate, a symbol, a
count) and every output a user, a log or a colleague could see is scanned for it: error
messages (and their pickles), warnings, log records, standard output and error, reprs,
ledgers (text, JSON, YAML), pickles of results and the files written. Before the fix the
suffix tree named the first out-of-alphabet symbol (``symbol 'XSECRETX' is not in the
declared alphabet``, also on the CLI's stderr) and a pickled result carried the ledger's
``private_notes``."""

from __future__ import annotations

import logging
import pickle
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import hierdp
from hierdp.cli import main
from hierdp.frontends.points import release_points
from hierdp.frontends.sequences import release_sequences
from hierdp.frontends.taxonomy import release_mixed, release_taxonomy

SECRET = "XSECRETX"  # a label, an id, a symbol
CHAR = "\u2603"  # a one-character symbol (snowman)
COORD = "31337713"  # the digits of a private coordinate
COUNT = 31337  # a private count: never in a ledger, repr, error or log (estimates may be near it)

DF = pd.DataFrame({"a": ["x", "x", "y", SECRET], "b": ["1", "2", "3", "1"]})
DOMAINS = {"a": ["x", "y"], "b": ["1", "2", "3"]}
TAXONOMY = hierdp.Tree.from_frame(pd.DataFrame({"g": ["A", "A", "B"], "l": ["a1", "a2", "b1"]}), levels=["g", "l"],
                                  domains="observed")


def _frame_door(df=DF, **kw):
    dk = {k: kw.pop(k) for k in ("unknown", "unit", "max_contributions", "cells") if k in kw}
    levels = kw.pop("levels", ["a", "b"])
    return df.dptree(levels=levels, domains=kw.pop("domains", DOMAINS), **dk).release(epsilon=1.0, seed=1, **kw)


def _xarray(unknown="raise"):
    import xarray as xr

    da = xr.DataArray(np.array([4, 2, 3]), dims=["a"], coords={"a": ["x", "y", SECRET]})
    return da.dptree(domains={"a": ["x", "y"]}, unknown=unknown).release(epsilon=1.0, seed=1)


def _dask(unknown="raise"):
    dd = pytest.importorskip("dask.dataframe")
    return dd.from_pandas(DF, npartitions=2).dptree(levels=["a", "b"], domains=DOMAINS,
                                                    unknown=unknown).release(epsilon=1.0, seed=1)


#: (door, what is planted, how it runs, planted text); a case returns a result or raises
CASES: list[tuple[str, Callable[[], Any], str]] = [
    ("pandas: label outside the domain", lambda: _frame_door(), SECRET),
    ("pandas: label outside the domain, dropped", lambda: _frame_door(unknown="drop"), SECRET),
    ("pandas: child label outside its parent's domain",
     lambda: _frame_door(domains={"a": ["x", "y", SECRET], "b": ["1", "2"]}), SECRET),
    ("pandas: privacy-unit ids", lambda: _frame_door(DF.assign(u=[SECRET, SECRET, "p", "q"], a=["x", "x", "y", "y"]),
                                                     unit="u", max_contributions=1), SECRET),
    ("pandas: cell outside the cell domain",
     lambda: _frame_door(DF.assign(a=["x", "x", "y", "y"], c=["F", "M", "F", SECRET]), levels=["a"],
                         domains={"a": ["x", "y"]}, cells={"c": ["F", "M"]}), SECRET),
    ("pandas: cell outside the cell domain, dropped",
     lambda: _frame_door(DF.assign(a=["x", "x", "y", "y"], c=["F", "M", "F", SECRET]), levels=["a"],
                         domains={"a": ["x", "y"]}, cells={"c": ["F", "M"]}, unknown="drop"), SECRET),
    ("Series: label outside the domain",
     lambda: DF.groupby(["a", "b"]).size().dptree(domains=DOMAINS).release(epsilon=1.0, seed=1), SECRET),
    ("xarray: label outside the domain", _xarray, SECRET),
    ("xarray: label outside the domain, dropped", lambda: _xarray("drop"), SECRET),
    ("Dask: label outside the domain", _dask, SECRET),
    ("Dask: label outside the domain, dropped", lambda: _dask("drop"), SECRET),
    ("points: a coordinate outside the bounds",
     lambda: release_points(pd.DataFrame({"x": [0.1, 313377.13], "y": [0.2, 0.3]}), ["x", "y"], [(0, 1), (0, 1)],
                            epsilon=1.0, seed=1), COORD),
    ("points: a coordinate inside the bounds",
     lambda: release_points(pd.DataFrame({"x": [0.1, 0.31337713] * 20, "y": [0.2, 0.3] * 20}), ["x", "y"],
                            [(0, 1), (0, 1)], epsilon=1.0, seed=1), COORD),
    ("sequences: a symbol outside the alphabet",
     lambda: release_sequences([["a", "b"], ["a", SECRET]], epsilon=1.0, max_length=4, alphabet=["a", "b"],
                               seed=1), SECRET),
    ("sequences: a character outside the alphabet",
     lambda: release_sequences(["ab", "a" + CHAR], epsilon=1.0, max_length=4, alphabet="ab", seed=1), CHAR),
    ("taxonomy: a leaf count", lambda: release_taxonomy(TAXONOMY, np.array([COUNT, 4, 5]), epsilon=1.0, seed=1),
     str(COUNT)),
    ("array API: a node count", lambda: hierdp.release(hierdp.Tree.complete(fanout=2, height=2),
                                                       np.array([COUNT + 2, COUNT, 2]), epsilon=1.0, seed=1),
     str(COUNT)),
    ("mixed: a coordinate outside the bounds",
     lambda: release_mixed(pd.DataFrame({"x": [0.1, 313377.13], "c": ["a1", "b1"]}), numeric={"x": (0, 1)},
                           categorical={"c": TAXONOMY}, epsilon=1.0, seed=1), COORD),
    ("mixed: a category outside the taxonomy",
     lambda: release_mixed(pd.DataFrame({"x": [0.1, 0.2], "c": ["a1", SECRET]}), numeric={"x": (0, 1)},
                           categorical={"c": TAXONOMY}, epsilon=1.0, seed=1), SECRET),
]


def _outputs(fn: Callable[[], Any], caplog, capsys) -> tuple[list[str], list[bytes], Any]:
    """Everything the case shows: texts (messages, warnings, logs, reprs, ledgers) and pickles."""
    texts: list[str] = []
    blobs: list[bytes] = []
    result = None
    with caplog.at_level(logging.DEBUG), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001 - the error is an output like any other
            texts += [str(exc), repr(exc), "".join(traceback.format_exception_only(type(exc), exc))]
            blobs.append(pickle.dumps(exc))
    texts += [str(w.message) for w in seen]
    texts += [r.getMessage() for r in caplog.records]
    out = capsys.readouterr()
    texts += [out.out, out.err]
    if result is not None:
        led = result.ledger
        texts += [repr(result), str(led), repr(led), led.to_json(), led.to_yaml()]
        blobs.append(pickle.dumps(led))
        try:
            blobs.append(pickle.dumps(result))
        except (AttributeError, TypeError, pickle.PicklingError):  # some results do not pickle: nothing leaves
            pass
    return texts, blobs, result


@pytest.mark.parametrize("name, fn, planted", CASES, ids=[c[0] for c in CASES])
def test_no_planted_value_in_any_output(name, fn, planted, caplog, capsys):
    texts, blobs, result = _outputs(fn, caplog, capsys)
    for t in texts:
        assert planted not in t, f"{name}: the private value shows in {t[:300]!r}"
    for b in blobs:
        assert planted.encode("utf-8") not in b and planted.encode("utf-32-le") not in b, \
            f"{name}: the private value is in a pickle"
    if result is not None and planted in (SECRET, CHAR):  # a dropped label is not a row of the table
        assert planted not in result.frame.to_csv()


def test_pickled_results_leave_private_notes_behind():
    """A pickled result (cache, worker, colleague) carried ``private_notes``: here the number
    of rows dropped as out of domain (1 of 4 rows). In-process copies keep them."""
    import copy

    r = _frame_door(unknown="drop")
    assert r.ledger.private_notes == {"rows_dropped_out_of_domain": 1}
    back = pickle.loads(pickle.dumps(r))
    assert back.ledger.private_notes == {}
    assert b"rows_dropped" not in pickle.dumps(r) and b"rows_dropped" not in pickle.dumps(r.ledger)
    assert back.ledger.to_json() == r.ledger.to_json() and np.array_equal(back.values, r.values)
    assert r.ledger.private_notes == {"rows_dropped_out_of_domain": 1}  # the original keeps them
    assert copy.deepcopy(r).ledger.private_notes == copy.copy(r.ledger).private_notes == r.ledger.private_notes


# ----------------------------------------------------------------------------- the CLI
def _spec(tmp_path: Path, csv: str, body: str) -> Path:
    (tmp_path / "d.csv").write_text(csv)
    spec = tmp_path / "s.yaml"
    spec.write_text("hierdp: 1\nsource: {path: d.csv}\n" + body)
    return spec


CLI_CASES = [
    ("label outside the domain", "region\nnorth\n" + SECRET + "\n",
     "hierarchy:\n  levels: [{name: region, domain: [north]}]\nprivacy: {epsilon: 1}\n", 2, SECRET),
    ("label outside the domain, dropped", "region\nnorth\n" + SECRET + "\n",
     "hierarchy:\n  unknown: drop\n  levels: [{name: region, domain: [north]}]\nprivacy: {epsilon: 1}\n", 0,
     SECRET),
    ("symbol outside the alphabet", "id,trip\n1,JFK BOS\n2,JFK " + SECRET + "\n",
     "decomposition:\n  name: suffix_tree\n  params: {column: trip, max_length: 5, alphabet: [BOS, JFK], "
     "separator: ' '}\nprivacy: {epsilon: 1}\n", 2, SECRET),
    ("a point outside the bounds", "id,x,y\n1,0.5,0.5\n2,313377.13,0.5\n",
     "decomposition:\n  name: privtree\n  params: {columns: [x, y], bounds: [[0, 1], [0, 1]]}\n"
     "privacy: {epsilon: 1}\n", 2, COORD),
]


@pytest.mark.parametrize("name, csv, body, code, planted", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_shows_no_planted_value(tmp_path, capsys, caplog, name, csv, body, code, planted):
    out = tmp_path / "out"
    with caplog.at_level(logging.DEBUG), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        rc = main(["release", str(_spec(tmp_path, csv, body)), "-o", str(out / "r.csv"), "--seed", "1"])
    assert rc == code
    std = capsys.readouterr()
    texts = [std.out, std.err, *(str(w.message) for w in seen), *(r.getMessage() for r in caplog.records)]
    if out.exists():
        texts += [p.read_text(encoding="utf-8") for p in out.iterdir()]
    for t in texts:
        assert planted not in t, f"{name}: the private value shows in {t[:300]!r}"
    assert "Traceback" not in std.err
