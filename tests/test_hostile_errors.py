"""Unclear errors (issue 35, item 7): each input now ends in one clear HierDPError (at the
command line: exit 2, one ``error:`` line, no traceback) where a user used to see an
internal error (``OverflowError``, ``ValueError: embedded null byte``,
``UnicodeEncodeError``, ``TypeError: unhashable``) or a message that did not name the
parameter at fault (``rho ... got nan``; a noise-scale error for ``max_length=10**9``)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import hierdp
from hierdp.cli import EXIT_USER, main
from hierdp.errors import BudgetError, DataError, HierDPError
from hierdp.frontends.sequences import release_sequences

T = hierdp.Tree.complete(fanout=2, height=2)


def _seq(data=("ab", "ba"), **kw):
    kw.setdefault("alphabet", "ab")
    kw.setdefault("max_length", 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return release_sequences(list(data), epsilon=1.0, seed=1, **kw)


CASES = [
    ("max_length 2**70", lambda: _seq(max_length=2 ** 70), DataError, r"max_length must be at most 1,048,576"),
    ("max_length of 400 digits", lambda: _seq(max_length=10 ** 400), DataError, "a number of 401 digits"),
    ("max_length 10**9", lambda: _seq(max_length=10 ** 9), DataError, "max_length must be at most"),
    ("max_length at the cap, eps 1", lambda: _seq(max_length=2 ** 20), BudgetError,
     "max_length=1048576.*lower max_length or raise epsilon"),
    ("max_length nan", lambda: _seq(max_length=float("nan")), DataError, "public positive integer, got nan"),
    ("max_length inf", lambda: _seq(max_length=float("inf")), DataError, "public positive integer, got inf"),
    ("lone surrogate", lambda: _seq(("ab", "a\ud800")), DataError, "not valid Unicode.*values not shown"),
    ("lone surrogate, observed", lambda: _seq(("ab", "a\ud800"), alphabet="observed"), DataError,
     "not valid Unicode"),
    ("nested list as a symbol", lambda: _seq((["a", ["b"]], ["a"]), alphabet=["a", "b"]), DataError,
     "not hashable.*values not shown"),
    ("nested list as a symbol, observed", lambda: _seq((["a", ["b"]], ["a"]), alphabet="observed"), DataError,
     "not hashable"),
    ("list in the alphabet", lambda: _seq((["a", "b"],), alphabet=["a", ["b"]]), DataError,
     "alphabet entries must be hashable"),
    ("delta 5e-324, discrete Gaussian",
     lambda: hierdp.release(T, np.array([5, 2, 3]), epsilon=1.0, delta=5e-324, mechanism="discrete_gaussian"),
     BudgetError, "delta must be at least 1e-100"),
    ("delta 1e-300, Ghazi",
     lambda: hierdp.release(T, np.array([5, 2, 3]), plan={"name": "ghazi", "alpha": 0.5}, epsilon=1.0,
                            delta=1e-300), BudgetError, "delta must be at least 1e-100"),
    ("delta 1e-300, Session", lambda: hierdp.Session(epsilon=1.0, delta=1e-300), BudgetError, "at least 1e-100"),
]


@pytest.mark.parametrize("name, fn, exc, match", CASES, ids=[c[0] for c in CASES])
def test_one_clear_error(name, fn, exc, match):
    with pytest.raises(exc, match=match) as info:
        fn()
    assert isinstance(info.value, HierDPError) and "\n" not in str(info.value)


def test_delta_at_the_floor_still_releases():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = hierdp.release(T, np.array([5, 2, 3]), plan={"name": "ghazi", "alpha": 0.5}, epsilon=1.0, delta=1e-100,
                           seed=1)
    assert r.ledger.delta == 1e-100


# ----------------------------------------------------------------------------- the CLI
def _spec(tmp_path: Path, privacy: str = "{epsilon: 1}", extra: str = "") -> Path:
    (tmp_path / "d.csv").write_text("region\nnorth\nsouth\n")
    spec = tmp_path / "s.yaml"
    spec.write_text("hierdp: 1\nsource: {path: d.csv}\nhierarchy:\n  levels: [{name: region, domain: [north, south]}]\n"
                    f"privacy: {privacy}\n{extra}")
    return spec


def _one_error(capsys, argv, match):
    assert main(argv) == EXIT_USER
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "internal error" not in err
    assert match in err, err


@pytest.mark.parametrize("cmd", ["validate", "release"])
def test_an_epsilon_of_400_digits(tmp_path, capsys, cmd):
    spec = _spec(tmp_path, privacy="{epsilon: 1" + "0" * 400 + "}")
    args = [cmd, str(spec)] + (["-o", str(tmp_path / "o.csv"), "-q"] if cmd == "release" else [])
    _one_error(capsys, args, "privacy.epsilon: must be a finite number")


@pytest.mark.parametrize("where", ["-o", "--ledger", "spec argument"])
def test_a_nul_byte_in_a_path_argument(tmp_path, capsys, where):
    spec = _spec(tmp_path)
    if where == "-o":
        argv = ["release", str(spec), "-o", str(tmp_path / "a\x00b.csv"), "-q"]
    elif where == "--ledger":
        argv = ["release", str(spec), "-o", str(tmp_path / "o.csv"), "--ledger", str(tmp_path / "l\x00.json"), "-q"]
    else:
        argv = ["release", str(spec) + "\x00", "-o", str(tmp_path / "o.csv"), "-q"]
    _one_error(capsys, argv, "holds a NUL character")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.csv", "s.yaml"]


def test_a_nul_byte_in_the_spec_output_path(tmp_path, capsys):
    spec = _spec(tmp_path, extra='output: {path: "o\\0.csv"}\n')
    _one_error(capsys, ["release", str(spec), "-q"], "output.path: the path holds a NUL character")


def test_a_suffix_tree_spec_with_a_huge_max_length(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("id,trip\n1,a b\n2,b\n")
    spec = tmp_path / "s.yaml"
    spec.write_text("hierdp: 1\nsource: {path: t.csv}\ndecomposition:\n  name: suffix_tree\n  params: {column: trip, "
                    "max_length: " + str(2 ** 70) + ", alphabet: [a, b], separator: ' '}\nprivacy: {epsilon: 1}\n")
    assert main(["release", str(spec), "-o", str(tmp_path / "o.csv"), "-q"]) == EXIT_USER
    err = capsys.readouterr().err
    assert "max_length" in err and "Traceback" not in err and "internal error" not in err


# ----------------------------------------------------------------------------- item 5: not counts
T3 = hierdp.Tree.complete(fanout=2, height=2)


def test_negative_counts_are_refused():
    """Before: release(T3, [-5, -2, -3]) gave estimates near [-3, -1, -2] without a word."""
    with pytest.raises(DataError, match=r"non-negative; some are negative \(values not shown") as info:
        hierdp.release(T3, np.array([-5, -2, -3]), epsilon=1.0)
    assert "-5" not in str(info.value)
    with pytest.raises(DataError, match="non-negative"):
        hierdp.release(T3, np.array([[1.0, -0.5], [1.0, 0.0], [0.0, -0.5]]), epsilon=1.0, mechanism="laplace")


def test_inconsistent_counts_are_refused_by_default():
    """Before: release(T3, [100, 1, 1]) gave [69, 33, 36] without a word (a root that is not
    the sum of its leaves; only check_counts="strict" refused it). Now the default refuses
    it in one line that names neither the node nor a value; "strict" is the same check."""
    with pytest.raises(DataError, match="not the sum of their leaves") as info:
        hierdp.release(T3, np.array([100, 1, 1]), epsilon=1.0)
    assert "100" not in str(info.value) and "\n" not in str(info.value) and "tree.aggregate" in str(info.value)
    with pytest.raises(DataError, match="not the sum"):  # histogram cells: each cell adds up on its own
        hierdp.release(T3, np.array([[2, 1], [1, 1], [1, 1]]), epsilon=1.0)
    with pytest.raises(DataError, match="not the sum"):  # floats: a real difference, not rounding
        hierdp.release(T3, np.array([1.0, 0.5, 0.4999]), epsilon=1.0, mechanism="laplace")
    big = hierdp.Tree.complete(fanout=3, height=6)
    leaves = np.random.default_rng(2).random((big.n_leaves, 2)) * 1e6
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = hierdp.release(big, big.aggregate(leaves) * (1 + 1e-12), epsilon=1.0, mechanism="laplace", seed=1)
        hierdp.release(T3, np.array([[2, 1], [1, 1], [1, 0]]), epsilon=1.0, seed=1)
    assert r.tree is big  # floats off by rounding (summed in another order) pass
    with pytest.raises(DataError, match="not the sum of their leaves"):
        hierdp.release(T3, np.array([100, 1, 1]), epsilon=1.0, check_counts="strict")
    with pytest.raises(DataError, match="not the sum"):
        hierdp.release(T3, np.array([1.0, 0.5, 0.25]), epsilon=1.0, check_counts="strict", mechanism="laplace")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = hierdp.release(T3, np.array([3.0, 1.5, 1.5]), epsilon=1.0, check_counts="strict", mechanism="laplace",
                           seed=1)
    assert not any("as given" in n for n in r.ledger.notes)


def test_values_as_given_are_recorded_in_the_ledger():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = hierdp.release(T3, np.array([-5, -2, -3]), epsilon=1.0, check_counts=False, seed=1)
    assert any("released as given (check_counts=False)" in n for n in r.ledger.notes)
    with pytest.raises(DataError, match="check_counts must be"):
        hierdp.release(T3, np.array([5, 2, 3]), epsilon=1.0, check_counts="yes")
