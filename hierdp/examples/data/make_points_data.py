"""Make the small synthetic point data used by ``specs/privtree.yaml``.

Deterministic (seeded) and synthetic: 4,000 "check-ins" in the unit square, skewed at
several scales as in PrivTree's §6 data (Zhang, Xiao & Xie 2016): a few dense Gaussian
clusters of very different widths, points along a road-like line, and a uniform
background. Coordinates are rounded to 4 decimals (a public ~10 m grid in a 10 km box).

    python specs/data/make_points_data.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).parent
N = 4000


def points(rng: np.random.Generator, n: int = N) -> pd.DataFrame:
    centres = np.array([[0.2, 0.3], [0.7, 0.75], [0.72, 0.2], [0.35, 0.8]])
    widths = np.array([0.01, 0.04, 0.002, 0.08])
    weights = np.array([0.3, 0.2, 0.1, 0.1])
    kind = rng.choice(6, size=n, p=np.r_[weights, 0.2, 0.1])
    xy = rng.random((n, 2))  # uniform background (kind 5)
    for k in range(4):
        sel = kind == k
        xy[sel] = centres[k] + widths[k] * rng.standard_normal((int(sel.sum()), 2))
    road = kind == 4  # a diagonal road with a little scatter
    t = rng.random(int(road.sum()))
    xy[road] = np.c_[t, 0.1 + 0.8 * t] + 0.003 * rng.standard_normal((t.size, 2))
    xy = np.clip(np.round(xy, 4), 0.0, 1.0)
    return pd.DataFrame({"checkin_id": np.arange(1, n + 1), "lon": xy[:, 0], "lat": xy[:, 1]})


def main() -> None:
    points(np.random.default_rng(20160626)).to_csv(HERE / "checkins.csv", index=False)


if __name__ == "__main__":
    main()
