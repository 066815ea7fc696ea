"""How the bundled demo data were made (run as a script to regenerate them).

A deterministic synthetic population on a census-like geography: 6 states, counties per
state and tracts per county of skewed sizes (log-normal), a few declared tracts with
nobody in them (so the release shows zero-count nodes), one row per person with an age
group. Codes follow the FIPS pattern (state ``SS``, county ``SSCCC``, tract
``SSCCCTTTTTT``). Entirely synthetic; released under CC0.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).parent
STATES = ["Avalon", "Borealis", "Cascadia", "Dunmore", "Eldoria", "Fenwick"]
AGE_GROUPS = ["0-17", "18-34", "35-64", "65+"]


def generate(seed: int = 20261121) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    geo_rows = []
    for s, name in enumerate(STATES, start=1):
        n_counties = int(rng.integers(3, 12))
        for c in range(1, n_counties + 1):
            n_tracts = int(np.clip(rng.lognormal(1.6, 0.7), 1, 40))
            for t in range(1, n_tracts + 1):
                geo_rows.append((f"{s:02d}", f"{s:02d}{2 * c - 1:03d}", f"{s:02d}{2 * c - 1:03d}{100 * t:06d}", name))
    geo = pd.DataFrame(geo_rows, columns=["state", "county", "tract", "state_name"])
    state_weight = rng.lognormal(0.0, 0.8, len(STATES))
    w = state_weight[geo["state"].astype(int).to_numpy() - 1] * rng.lognormal(0.0, 1.0, len(geo))
    empty = rng.random(len(geo)) < 0.03  # declared tracts where nobody lives
    w[empty] = 0.0
    sizes = rng.poisson(w / w.sum() * 60_000)
    tract_idx = np.repeat(np.arange(len(geo)), sizes)
    people = geo.iloc[tract_idx][["state", "county", "tract"]].reset_index(drop=True)
    people.insert(0, "person_id", np.arange(len(people)) + 1)
    ages = rng.choice(len(AGE_GROUPS), size=len(people), p=[0.22, 0.23, 0.38, 0.17])
    people["age_group"] = np.asarray(AGE_GROUPS)[ages]
    people = people.sample(frac=1.0, random_state=seed % (2**32)).reset_index(drop=True)
    people["person_id"] = np.arange(len(people)) + 1
    return people, geo


if __name__ == "__main__":
    people, geo = generate()
    with gzip.open(HERE / "census_demo.csv.gz", "wt", compresslevel=9) as fh:
        people.to_csv(fh, index=False)
    geo.to_csv(HERE / "census_demo_geography.csv", index=False)
    print(f"{len(people)} people, {len(geo)} tracts, {geo['county'].nunique()} counties")
