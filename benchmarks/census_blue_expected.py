"""The expected error of the GLS estimate (BLUE) of unit totals in the ``pl94`` design, per level,
from its exact variances: no data, no noise (``docs/comparison.md``, issue 47).

Per level, the information a unit's own queries give on its total (each marginal sums
``prod(cells summed over)`` cells of the total direction; under the spec's substitution
neighbours a marginal's L2 sensitivity is sqrt(2), so its discrete Gaussian noise has
variance ``1 / rho_query``), a scalar GLS on the block list's tree (``hierdp.postprocess("blue")``,
its exact variances; US and State totals invariant: variance 0), and per unit
``E|error| = sqrt(2 / pi * variance)``. The benchmark's ``--ordering none`` measures the same
estimate on Wyoming (1.40, 1.29, 1.22 against 1.38, 1.33, 1.23 expected).

    python benchmarks/census_blue_expected.py OUT/pl94-bench.yaml OUT/blocks.csv

(the spec and block list ``bench_census_us.py --out OUT`` writes).
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import yaml

import hierdp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec", help="the pl94 spec the benchmark wrote (its plan, budget and GEOID levels)")
    ap.add_argument("blocks", help="the public block list (CSV, column geoid)")
    args = ap.parse_args()
    with open(args.spec, encoding="utf-8") as fh:
        spec = yaml.safe_load(fh)
    geo = spec["hierarchy"]["geoid"]
    column = geo.get("column", "geoid")
    read = pacsv.ConvertOptions(column_types={column: pa.string()})  # codes keep their leading zeros
    blocks = pd.Series(pacsv.read_csv(args.blocks, convert_options=read).column(column).to_pylist(), dtype="string")
    levels = geo["levels"]
    tree = hierdp.Tree.from_frame(pd.DataFrame({lv: blocks.str.slice(0, n) for lv, n in levels.items()}),
                                  list(levels), domains="observed")
    sizes = {c["name"]: len(c["domain"]) for c in spec["cells"]}
    k = math.prod(sizes.values())
    rho, budget = spec["privacy"]["rho"], spec["plan"]["params"]["budget"]
    total = sum(budget.values())
    info = {}
    for lv, marginals in spec["plan"]["params"]["strategy"].items():
        info[lv] = sum(math.prod(v for d, v in sizes.items() if d not in m["dims"])
                       * rho * budget[lv] / total * m["share"] for m in marginals)
    names = [spec["hierarchy"].get("root", "total"), *levels]
    depth = np.asarray(tree.depth)
    own = np.array([k / info[names[d]] if names[d] in info else np.inf for d in range(len(names))])[depth]
    own[depth <= 1] = 0.0  # the US and State totals are invariant
    var = np.asarray(hierdp.postprocess("blue", tree, np.zeros(tree.n_nodes), variance=own).variance)
    print(f"{'level':<12}{'units':>11}  expected BLUE MAE of unit totals")
    for d, lv in enumerate(names):
        sel = depth == d
        print(f"{lv:<12}{int(sel.sum()):>11,}  {float(np.mean(np.sqrt(2 / np.pi * var[sel]))):.3f}")


if __name__ == "__main__":
    main()
