"""The Spark DataFrame front-end on a local[2] session (one per module, bound to 127.0.0.1).

The reference is the pandas door on the same records: identical releases for the same seed,
contribution bounding included (the choice depends on the bounding key and the rows'
content, not on their order or partitioning), and the pandas errors word for word for bad
input (a column missing everywhere, a column missing from one Parquet part, an
out-of-domain value in one partition). The bound's law is tested too (each unit keeps a
uniformly chosen c of its rows). Skipped, saying why, without pyspark or Java.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'hierdp[spark]')")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java runtime: the Spark tests need Java 17+", allow_module_level=True)

import hierdp  # noqa: E402
from hierdp.errors import DataError, MissingDependencyError  # noqa: E402
from hierdp.frontends.spark import SparkDPTree, local_session, merge_problems  # noqa: E402

pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
              pytest.mark.filterwarnings("ignore::ResourceWarning"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

LEVELS = ["state", "county"]
DOMAINS = {"state": ["A", "B", "C"], "county": {"A": ["x", "y"], "B": ["x", "z"], "C": ["w"]}}
CELLS = {"age": [0, 1, 2], "sex": ["F", "M"]}
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def spark():
    session = local_session("local[2]", shuffle_partitions=4)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def people() -> pd.DataFrame:
    rng = np.random.default_rng(21)
    n = 2000
    state = rng.choice(["A", "B"], n)
    county = np.where(state == "A", rng.choice(["x", "y"], n), rng.choice(["x", "z"], n))
    return pd.DataFrame({"state": state, "county": county, "age": rng.choice([0, 1, 2], n),
                         "sex": rng.choice(["F", "M"], n), "pid": rng.integers(0, 300, n),
                         "n": rng.integers(0, 5, n)})


def _sdf(spark, df: pd.DataFrame, parts: int = 4):
    return spark.createDataFrame(df).repartition(parts)


@pytest.mark.parametrize("kw", [dict(domains=DOMAINS, cells=CELLS),
                                dict(domains="observed", cells={"age": "observed", "sex": ["F", "M"]}),
                                dict(domains=DOMAINS, cells=CELLS, count="n"),
                                dict(domains=DOMAINS),
                                dict(domains=DOMAINS, cells={"sex": ["F"]}, unknown="drop"),
                                dict(domains=DOMAINS, cells=CELLS, unit="pid", max_contributions=2),
                                dict(domains="observed", unit="pid", max_contributions=1)],
                         ids=["declared", "observed", "count", "no-cells", "drop", "bound-2", "bound-1-observed"])
def test_spark_release_is_the_pandas_release(spark, people, kw):
    sdf = _sdf(spark, people)
    post = ["blue", "nonneg", "round"]
    ref = hierdp.dptree(people, levels=LEVELS, **kw).release(epsilon=1.0, seed=9, postprocess=post)
    door = hierdp.dptree(sdf, levels=LEVELS, **kw)
    assert isinstance(door, SparkDPTree)
    r = door.release(epsilon=1.0, seed=9, postprocess=post)
    assert r.tree == ref.tree
    np.testing.assert_array_equal(r.values, ref.values)
    pd.testing.assert_frame_equal(r.frame, ref.frame)
    assert r.ledger.private_notes == ref.ledger.private_notes
    # and the true counts against a brute-force count of the records
    if "unit" in kw:
        assert r.ledger.private_notes["rows_dropped_by_contribution_bound"] > 0
    elif kw.get("unknown") != "drop":
        leaf = people.groupby(["state", "county"])["n" if "count" in kw else "pid"].agg(
            "sum" if "count" in kw else "size")
        t = door.tree
        got = door.true_counts()
        got = got.sum(axis=1) if got.ndim == 2 else got
        for (s, c), v in leaf.items():
            assert got[t.node_id(s, c)] == v


def test_a_missing_column_is_the_pandas_error(spark, people):
    with pytest.raises(DataError) as pandas_err:
        hierdp.dptree(people.drop(columns="sex"), levels=LEVELS, domains=DOMAINS, cells=CELLS)
    with pytest.raises(DataError) as spark_err:
        hierdp.dptree(_sdf(spark, people.drop(columns="sex")), levels=LEVELS, domains=DOMAINS, cells=CELLS)
    assert str(spark_err.value) == str(pandas_err.value)
    assert "missing cell column 'sex'" in str(spark_err.value)


def test_an_out_of_domain_value_in_one_partition_is_the_pandas_error(spark, people):
    broken = people.copy()
    broken.loc[1234, "sex"] = "X"  # one bad cell value ...
    broken.loc[77, "county"] = "q"  # ... and one bad county, in another partition
    with pytest.raises(DataError) as pandas_err:
        hierdp.dptree(broken, levels=LEVELS, domains=DOMAINS, cells=CELLS).true_counts()
    sdf = spark.createDataFrame(broken, schema="state string, county string, age long, sex string, pid long, n long")
    sdf = sdf.repartition(4, "pid")
    with pytest.raises(DataError) as spark_err:
        hierdp.dptree(sdf, levels=LEVELS, domains=DOMAINS, cells=CELLS).release(epsilon=1.0, seed=0)
    assert str(spark_err.value) == str(pandas_err.value)
    assert "'county' values outside the declared domain of their parent; 'sex' values outside" in str(spark_err.value)
    dropped = hierdp.dptree(sdf, levels=LEVELS, domains=DOMAINS, cells=CELLS, unknown="drop")
    assert len(dropped.out_of_domain().toPandas()) == 2
    assert dropped.release(epsilon=1.0, seed=0).ledger.private_notes["rows_dropped_out_of_domain"] == 2


def test_a_column_missing_from_one_parquet_part_is_the_pandas_error(spark, people, tmp_path):
    parts = [people.iloc[:700], people.iloc[700:1400].drop(columns="sex"), people.iloc[1400:]]
    for i, p in enumerate(parts):
        p.to_parquet(tmp_path / f"part-{i}.parquet", index=False)
    whole = pd.concat(parts, ignore_index=True)  # the missing column's values are missing
    with pytest.raises(DataError) as pandas_err:
        hierdp.dptree(whole, levels=LEVELS, domains=DOMAINS, cells=CELLS).true_counts()
    sdf = spark.read.option("mergeSchema", "true").parquet(str(tmp_path))
    with pytest.raises(DataError) as spark_err:
        hierdp.dptree(sdf, levels=LEVELS, domains=DOMAINS, cells=CELLS).true_counts()
    assert str(spark_err.value) == str(pandas_err.value)
    assert "missing 'sex' values" in str(spark_err.value)


def test_a_bad_count_in_one_partition_is_the_pandas_error(spark, people):
    broken = people.assign(n=people["n"].astype(float))
    broken.loc[1500, "n"] = np.nan
    with pytest.raises(DataError) as pandas_err:
        hierdp.dptree(broken, levels=LEVELS, domains=DOMAINS, count="n").true_counts()
    with pytest.raises(DataError) as spark_err:
        hierdp.dptree(_sdf(spark, broken), levels=LEVELS, domains=DOMAINS, count="n").true_counts()
    assert str(spark_err.value) == str(pandas_err.value)


def test_problems_merge_as_pandas_finds_them():
    # 'state' missing in one task and outside the domain in another: pandas sees both rows
    got = merge_problems(["missing 'state' values", "'sex' values outside the declared cell domain",
                          "'state' values outside the declared domain", "missing 'county' values"],
                         ["state", "county"], ["age", "sex"])
    assert got == ["'state' values outside the declared domain", "missing 'county' values",
                   "'sex' values outside the declared cell domain"]


def test_contribution_bounding_keeps_c_uniformly_chosen_rows_per_unit(spark):
    # 3000 units with one row in each of the three counties of A (x, y, z'): c=1 keeps one,
    # uniformly: each county ~ Binomial(3000, 1/3); units with fewer rows keep all of them
    n_units = 3000
    rows = pd.DataFrame({"pid": np.repeat(np.arange(n_units), 3), "state": "A",
                         "county": np.tile(["x", "y", "z"], n_units)})
    small = pd.DataFrame({"pid": np.arange(n_units, n_units + 100), "state": "B", "county": "x"})
    df = pd.concat([rows, small], ignore_index=True)
    doms = {"state": ["A", "B"], "county": {"A": ["x", "y", "z"], "B": ["x"]}}
    door = hierdp.dptree(_sdf(spark, df, 6), levels=LEVELS, domains=doms, unit="pid", max_contributions=1)
    counts, notes = door.node_values()
    t = door.tree
    per_county = np.array([counts[t.node_id("A", c)] for c in "xyz"])
    assert per_county.sum() == n_units and counts[t.node_id("B", "x")] == 100
    assert notes["rows_dropped_by_contribution_bound"] == 2 * n_units
    # chi-square with 2 degrees of freedom against the uniform choice; 20 is its 1 - 4.5e-5 quantile
    chi2 = float(((per_county - n_units / 3) ** 2 / (n_units / 3)).sum())
    assert chi2 < 20.0, per_county
    # c=2 keeps two of the three rows: each county ~ 2/3 of the units
    two = hierdp.dptree(_sdf(spark, df, 3), levels=LEVELS, domains=doms, unit="pid", max_contributions=2)
    counts2, _ = two.node_values()
    per2 = np.array([counts2[t.node_id("A", c)] for c in "xyz"])
    assert per2.sum() == 2 * n_units and np.all(np.abs(per2 - 2 * n_units / 3) < 5 * np.sqrt(n_units * 2 / 9))
    # seeded (tests only): the same whatever the partitioning, and the pandas door's
    a = hierdp.dptree(_sdf(spark, df, 2), levels=LEVELS, domains=doms, unit="pid", max_contributions=1)
    b = hierdp.dptree(_sdf(spark, df, 5), levels=LEVELS, domains=doms, unit="pid", max_contributions=1)
    ra, rb = a.release(epsilon=1.0, seed=4), b.release(epsilon=1.0, seed=4)
    np.testing.assert_array_equal(ra.values, rb.values)
    assert ra.ledger.private_notes == rb.ledger.private_notes
    rp = hierdp.dptree(df, levels=LEVELS, domains=doms, unit="pid", max_contributions=1).release(epsilon=1.0, seed=4)
    np.testing.assert_array_equal(ra.values, rp.values)


def test_a_unit_without_an_id_is_the_pandas_error(spark, people):
    broken = people.assign(pid=people["pid"].astype(float))
    broken.loc[3, "pid"] = np.nan
    with pytest.raises(DataError) as pandas_err:
        hierdp.dptree(broken, levels=LEVELS, domains=DOMAINS, unit="pid", max_contributions=2).true_counts()
    with pytest.raises(DataError) as spark_err:
        hierdp.dptree(_sdf(spark, broken), levels=LEVELS, domains=DOMAINS, unit="pid",
                      max_contributions=2).true_counts()
    assert str(spark_err.value) == str(pandas_err.value)


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env})


def test_without_pyspark_one_line_names_the_extra():
    code = ("import sys; sys.modules['pyspark'] = None\n"
            "import hierdp\n"
            "from hierdp.frontends.spark import local_session\n"
            "try:\n    local_session()\nexcept ImportError as e:\n    print(type(e).__name__, e)\n")
    out = _run(code, {})
    assert out.stdout.strip() == ("MissingDependencyError this feature needs the optional package 'pyspark'; "
                                  "install it with: pip install 'hierdp[spark]'"), out.stderr
    assert MissingDependencyError("pyspark", "spark").extra == "spark"


@pytest.mark.parametrize("env", [{"JAVA_HOME": "/nonexistent/jdk"}, {"JAVA_HOME": "", "PATH": "/nonexistent"}],
                         ids=["bad-JAVA_HOME", "no-java-on-PATH"])
def test_without_java_one_clear_line(env):
    code = ("import hierdp\nfrom hierdp.frontends.spark import local_session\n"
            "try:\n    local_session()\nexcept Exception as e:\n    print(type(e).__name__, e)\n")
    if env.get("JAVA_HOME") == "":
        env = {**env}
        env.pop("JAVA_HOME")
        code = "import os; os.environ.pop('JAVA_HOME', None)\n" + code
    out = _run(code, env)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1, (out.stdout, out.stderr)
    assert lines[0].startswith("JavaNotFoundError Spark needs a Java runtime (17 or later) and ")
    assert ("JAVA_HOME=/nonexistent/jdk has no bin/java" in lines[0] if "JAVA_HOME" in env
            else "no java on the PATH" in lines[0])


# ---------------------------------------------------------------- subtree tasks on Spark
def _split_job():
    rng = np.random.default_rng(31)
    rows = [(f"s{s}", f"c{s}{c}", f"t{s}{c}{t}", f"b{s}{c}{t}{b}") for s in range(5) for c in range(5)
            for t in range(4) for b in range(10)]
    paths = pd.DataFrame(rows, columns=["state", "county", "tract", "block"])
    per_leaf = rng.integers(0, 4, size=(len(paths), 2)) * (rng.random((len(paths), 1)) < 0.6)
    recs = []
    for cell, sex in enumerate(["f", "m"]):
        rep = paths.loc[paths.index.repeat(per_leaf[:, cell])].assign(sex=sex)
        recs.append(rep)
    records = pd.concat(recs, ignore_index=True).sample(frac=1.0, random_state=3).reset_index(drop=True)
    return paths, records


SPLIT_LEVELS = ["state", "county", "tract", "block"]
SPLIT = {"level": "county", "memory": 81 * 60 * 2}
SPLIT_KW = dict(epsilon=2.0, seed=11, postprocess=["blue", {"name": "nonneg", "params": {"method": "topdown"}},
                                                    {"name": "round", "params": {"method": "topdown"}}])


def _long(frame: pd.DataFrame) -> pd.Series:
    key = frame[SPLIT_LEVELS].astype("string").fillna("-").agg("/".join, axis=1) + "|" + frame["sex"].astype(str)
    return pd.Series(frame["estimate"].to_numpy(), index=key.to_numpy()).sort_index()


def test_subtree_tasks_on_spark_equal_the_local_split_release_bit_for_bit(spark, tmp_path):
    from hierdp.frontends.spark import release_to_dataset

    paths, records = _split_job()
    cells = {"sex": ["f", "m"]}
    local = hierdp.dptree(records, levels=SPLIT_LEVELS, domains=paths, cells=cells)
    part = hierdp.subtrees.partition(local.tree, SPLIT, n_cells=2)
    assert part.roots.size == 25 and part.n_tasks >= 20
    mem = local.release(split=SPLIT, **SPLIT_KW).frame
    mem = mem.assign(sex=np.where(mem["cell"] == 0, "f", "m")) if "cell" in mem else mem
    door = hierdp.dptree(_sdf(spark, records, 3), levels=SPLIT_LEVELS, domains=paths, cells=cells)
    ledger = release_to_dataset(door, tmp_path / "out", split=SPLIT, **SPLIT_KW)
    out = tmp_path / "out"
    assert (out / "_SUCCESS").exists() and (out / "_ledger.json").exists()
    parts = sorted(p.name for p in out.glob("part-*.parquet"))
    assert parts == [f"part-{i:05d}.parquet" for i in range(part.n_tasks + 1)]
    text = (out / "_ledger.json").read_text()
    assert hierdp.Ledger.from_json(text).release_id == ledger.release_id
    import pyarrow.parquet as pq
    assert all(pq.read_schema(p).metadata[b"hierdp.ledger"].decode() == text for p in out.glob("part-*.parquet"))
    ds = pd.read_parquet(out)
    want, got = _long(mem), _long(ds)
    assert got.index.is_unique and (ds["estimate"] != 0).all()
    assert got.equals(want[want != 0])  # the same values in the same cells, exactly
    assert ledger.levels == local.release(split=SPLIT, **SPLIT_KW).ledger.levels


SPARK_SPEC = """hierdp: 1
source:
  path: records.parquet
  engine: spark
hierarchy:
  root: total
  paths:
    demo: census
  levels:
    - name: state
    - name: county
    - name: tract
privacy:
  epsilon: 1.0
postprocess: [blue, {name: nonneg, params: {method: topdown}}, {name: round, params: {method: topdown}}]
execution:
  engine: spark
  split: county
  memory: 9kB
"""


def test_a_spec_runs_the_subtree_tasks_on_spark(spark, tmp_path):
    from hierdp.data import load_demo
    from hierdp.errors import SpecError
    from hierdp.spec.runner import load_spec, release_dataset_spec

    load_demo("census").to_parquet(tmp_path / "records.parquet", index=False)
    (tmp_path / "spec.yaml").write_text(SPARK_SPEC)
    ledger = release_dataset_spec(str(tmp_path / "spec.yaml"), tmp_path / "out", seed=3)
    local = SPARK_SPEC.replace("  engine: spark\n", "", 2).replace("execution:\n  split: county\n  memory: 9kB\n", "")
    (tmp_path / "local.yaml").write_text(local)
    mem = hierdp.run_spec(str(tmp_path / "local.yaml"), seed=3, write=False, split={"level": "county", "memory": "9kB"})
    levels = ["state", "county", "tract"]

    def keyed(frame):
        key = frame[levels].astype("string").fillna("-").agg("/".join, axis=1)
        return pd.Series(frame["estimate"].to_numpy(), index=key.to_numpy()).sort_index()

    want, got = keyed(mem.frame), keyed(pd.read_parquet(tmp_path / "out"))
    assert got.equals(want[want != 0])
    assert ledger.levels == mem.ledger.levels and len(list((tmp_path / "out").glob("part-*.parquet"))) >= 3
    with pytest.raises(SpecError, match="set source.engine: spark too"):
        load_spec(local + "execution: {engine: spark}\n")


def test_a_bad_value_in_a_row_the_bound_drops_still_raises_whatever_the_key(spark):
    from hierdp.frontends.base import door_rng
    from tests.test_contributions import BAD_KW, _one_bad_row_in_a_big_unit

    sdf = _sdf(spark, _one_bad_row_in_a_big_unit(), 2)
    for seed in range(3):
        with pytest.raises(DataError, match="'sex' values outside the declared cell domain"):
            hierdp.dptree(sdf, **BAD_KW).node_values(door_rng(seed, 97))


# ---------------------------------------------------------------- Spark Connect
def test_the_door_and_its_subtree_tasks_run_under_spark_connect():
    """A Spark Connect session (a local Connect server; the client talks gRPC, as on
    Databricks): the bounded door equals the pandas door, a bad value gives the pandas
    error, the subtree tasks equal the local split release. In a fresh process (a Connect
    server cannot share this process's classic session)."""
    pytest.importorskip("grpc", reason="Spark Connect needs pip install 'hierdp[spark]' (pyspark[connect])")
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "_spark_connect_check.py")], capture_output=True,
                          text=True, timeout=900, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["session"] == "pyspark.sql.connect.session" and got["frame"] == "pyspark.sql.connect.dataframe"
    assert got["door_equal"] and got["error_equal"] and got["tasks_equal"], got


def test_the_door_does_not_repeat_pyspark_pandas3_warning():
    # issue 53 item 5: every PySpark call warned that pandas 3 is not fully supported; the door
    # is tested under pandas 3, so once imported that one message is not shown (others are)
    code = (
        "import warnings, pandas\n"
        "from pyspark.sql.pandas.utils import require_minimum_pandas_version as check\n"
        "in_pyspark = {'__name__': 'pyspark.sql.pandas.conversion', 'check': check}  # the caller it names\n"
        "def shown():\n"
        "    with warnings.catch_warnings(record=True) as seen:\n"
        "        exec('check()', in_pyspark)\n"
        "        warnings.warn('another FutureWarning', FutureWarning)\n"
        "    return sorted({str(w.message)[:30] for w in seen})\n"
        "before = shown()\n"
        "import hierdp.frontends.spark\n"
        "print(pandas.__version__.split('.')[0], before, shown())\n")
    out = subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}).stdout
    major, rest = out.split(" ", 1)
    if int(major) < 3:
        pytest.skip("pandas < 3: PySpark does not warn")
    assert rest.strip() == ("['PySpark does not yet fully sup', 'another FutureWarning'] "
                            "['another FutureWarning']"), rest
