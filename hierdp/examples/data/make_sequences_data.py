"""Make the small synthetic sequence data used by ``specs/sequences.yaml``.

Deterministic (seeded) and synthetic: 2,000 aircraft itineraries, one a row, each a
sequence of airport codes separated by spaces ("JFK BOS ORD"). An aircraft starts at a
hub and flies a random number of legs (1 to 14, most short, as in the flight data of
PrivTree's §6, Zhang, Xiao & Xie 2016) along a fixed route map, hubs more often than
spokes, so that some contexts predict the next airport much better than others.

    python specs/data/make_sequences_data.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).parent
N = 2000
#: the public alphabet (the spec lists it) and the public route map: where a leg may go next
ROUTES = {
    "ATL": ["JFK", "ORD", "DEN", "LAX", "BOS"],
    "BOS": ["JFK", "ORD", "ATL"],
    "DEN": ["ORD", "LAX", "SEA", "SFO", "ATL"],
    "JFK": ["BOS", "ORD", "LAX", "SFO", "ATL"],
    "LAX": ["SFO", "JFK", "DEN", "SEA", "ATL"],
    "ORD": ["JFK", "DEN", "LAX", "BOS", "ATL", "SEA"],
    "SEA": ["SFO", "DEN", "LAX", "ORD"],
    "SFO": ["LAX", "SEA", "JFK", "DEN"],
}
HUBS = ["ATL", "ORD", "JFK", "LAX", "DEN"]


def trips(rng: np.random.Generator, n: int = N) -> pd.DataFrame:
    hub_weight = np.array([0.3, 0.25, 0.2, 0.15, 0.1])
    rows = []
    for i in range(n):
        legs = int(min(14, rng.geometric(0.3)))
        here = HUBS[rng.choice(len(HUBS), p=hub_weight)]
        path = [here]
        for _ in range(legs):
            nxt = ROUTES[here]
            # hubs are likelier next stops; never straight back to where the aircraft came from
            w = np.array([3.0 if a in HUBS else 1.0 for a in nxt])
            if len(path) > 1 and path[-2] in nxt:
                w[nxt.index(path[-2])] = 0.2
            here = nxt[rng.choice(len(nxt), p=w / w.sum())]
            path.append(here)
        rows.append((f"N{10000 + i}", " ".join(path)))
    return pd.DataFrame(rows, columns=["aircraft", "trip"])


def main() -> None:
    trips(np.random.default_rng(20160627)).to_csv(HERE / "trips.csv", index=False)


if __name__ == "__main__":
    main()
