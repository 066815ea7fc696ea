"""Make the small synthetic P.L. 94 persons data used by ``specs/pl94.yaml``.

Deterministic (seeded) and synthetic, in the shape of the 2020 redistricting persons
files: a public list of block GEOIDs (15 characters: State 2, County 3, Tract 6, Block 4,
the block group the block's first digit; some blocks empty) and a counts file with one row
per (block, hhgq, votingage, hispanic, cenrace) that has people: ``GEOID``, the four
attributes as 0-based codes (hhgq 8, votingage 2, hispanic 2, cenrace 63) and ``count``.
Replace both with the real files to release a real geography.

    python specs/data/make_pl94_data.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).parent


def blocks() -> list[str]:
    out = []
    for state, counties in (("10", ("001", "003", "005")), ("56", ("001", "021"))):
        for county in counties:
            for tract in ("010100", "010200"):
                for bg in ("1", "2"):
                    out += [f"{state}{county}{tract}{bg}{b:03d}" for b in (0, 1, 2)]
    return out


def counts(rng: np.random.Generator, geoids: list[str]) -> pd.DataFrame:
    rows = []
    for g in geoids:
        if rng.random() < 0.2:  # an empty block (it stays in the public list)
            continue
        n = int(rng.integers(5, 60))
        people = pd.DataFrame({
            "hhgq": rng.choice(8, n, p=[0.93] + [0.01] * 7),
            "votingage": (rng.random(n) < 0.77).astype(int),
            "hispanic": (rng.random(n) < 0.18).astype(int),
            "cenrace": rng.choice(63, n, p=np.r_[[0.6, 0.13, 0.01, 0.06, 0.002, 0.08], np.full(57, 0.118 / 57)]),
        })
        agg = people.value_counts().rename("count").reset_index()
        agg.insert(0, "GEOID", g)
        rows.append(agg)
    return pd.concat(rows, ignore_index=True)


def main() -> None:
    geoids = blocks()
    pd.DataFrame({"GEOID": geoids}).to_csv(HERE / "pl94_blocks.csv", index=False)
    counts(np.random.default_rng(20200401), geoids).to_csv(HERE / "pl94_counts.csv", index=False)


if __name__ == "__main__":
    main()
