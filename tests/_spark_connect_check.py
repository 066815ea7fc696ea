"""Run by tests/test_spark.py in a fresh process: the Spark door and its subtree tasks under a
Spark Connect session (``SparkSession.builder.remote("local[2]")``: a local Connect server, the
client speaking to it over gRPC as on Databricks). Prints one JSON line of checks."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import warnings

import numpy as np
import pandas as pd

warnings.simplefilter("ignore")
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def main() -> None:
    from pyspark.sql import SparkSession

    import hierdp
    from hierdp.errors import DataError
    from hierdp.frontends.base import door_rng
    from hierdp.frontends.spark import release_to_dataset

    t0 = time.time()
    spark = SparkSession.builder.remote("local[2]").config("spark.sql.shuffle.partitions", "4").getOrCreate()
    out: dict[str, object] = {"session": type(spark).__module__}
    rng = np.random.default_rng(5)
    n = 3000
    levels = ["state", "county", "tract"]
    rows = [(f"{s:02d}", f"{s:02d}{c:03d}", f"{s:02d}{c:03d}{t:02d}") for s in range(1, 4) for c in range(1, 5)
            for t in range(1, 6)]
    paths = pd.DataFrame(rows, columns=levels)
    df = paths.iloc[rng.integers(0, len(paths), n)].reset_index(drop=True)
    df = df.assign(sex=rng.choice(["F", "M"], n), pid=rng.integers(0, 900, n))
    kw = dict(levels=levels, domains=paths, cells={"sex": ["F", "M"]}, unit="pid", max_contributions=2)
    sdf = spark.createDataFrame(df).repartition(3)
    out["frame"] = type(sdf).__module__
    door = hierdp.dptree(sdf, **kw)
    a = door.release(epsilon=1.0, seed=7)
    b = hierdp.dptree(df, **kw).release(epsilon=1.0, seed=7)
    out["door_equal"] = bool(np.array_equal(a.values, b.values)) and a.ledger.private_notes == b.ledger.private_notes
    bad = df.copy()
    bad.loc[17, "sex"] = "X"
    msgs = []
    for frame in (bad, spark.createDataFrame(bad).repartition(3)):
        try:
            hierdp.dptree(frame, **{**kw, "unit": None, "max_contributions": None}).node_values(door_rng(7, 97))
        except DataError as exc:
            msgs.append(str(exc))
    out["error_equal"] = len(msgs) == 2 and msgs[0] == msgs[1]
    split = {"level": "county", "memory": 4000}
    post = ["blue", {"name": "nonneg", "params": {"method": "topdown"}},
            {"name": "round", "params": {"method": "topdown"}}]
    local = hierdp.dptree(df, **kw).release(split=split, epsilon=2.0, seed=11, postprocess=post).frame
    with tempfile.TemporaryDirectory() as tmp:
        release_to_dataset(door, os.path.join(tmp, "out"), split=split, epsilon=2.0, seed=11, postprocess=post)
        ds = pd.read_parquet(os.path.join(tmp, "out"))

    def keyed(f: pd.DataFrame) -> pd.Series:
        k = f[levels].astype("string").fillna("-").agg("/".join, axis=1) + "|" + f["sex"].astype(str)
        return pd.Series(f["estimate"].to_numpy(), index=k.to_numpy()).sort_index()

    want, got = keyed(local), keyed(ds)
    out["tasks_equal"] = bool(got.equals(want[want != 0])) and len(got) > 0
    out["seconds"] = round(time.time() - t0, 1)
    spark.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
