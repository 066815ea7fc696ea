"""Make the small synthetic ad-attribution data used by ``specs/attribution.yaml``.

Deterministic (seeded) and synthetic: conversions of 3 campaigns in 4 locations with a
conversion-delay bucket, for two quarters; ``attribution_prior.csv`` is a *noisy*
release of the first quarter (ε = 1), the prior of the second quarter's greedy budget.

    python specs/data/make_attribution_data.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).parent
CAMPAIGNS = ["spring_sale", "brand", "retargeting"]
LOCATIONS = ["north", "south", "east", "west"]
DELAYS = ["0-1h", "1-24h", "1-7d", "7-30d"]  # the unknown attribute: its full domain


def quarter(rng: np.random.Generator, n: int) -> pd.DataFrame:
    camp = rng.choice(len(CAMPAIGNS), size=n, p=[0.6, 0.3, 0.1])
    loc = rng.choice(len(LOCATIONS), size=n, p=[0.4, 0.3, 0.2, 0.1])
    delay = rng.choice(len(DELAYS), size=n, p=[0.5, 0.3, 0.15, 0.05])
    return pd.DataFrame({
        "conversion_id": np.arange(1, n + 1),
        "campaign": np.asarray(CAMPAIGNS)[camp],
        "location": np.asarray(LOCATIONS)[loc],
        "delay": np.asarray(DELAYS)[delay],
    })


def main() -> None:
    import hierdp  # noqa: F401  (registers .dptree)

    rng = np.random.default_rng(20231)
    q1, q2 = quarter(rng, 3000), quarter(rng, 3200)
    q1.to_csv(HERE / "conversions_q1.csv", index=False)
    q2.to_csv(HERE / "conversions_q2.csv", index=False)
    prior = (q1.dptree(levels=["campaign", "location", "delay"],
                       domains={"campaign": "observed", "location": "observed", "delay": DELAYS})
               .release(epsilon=1.0, postprocess=["blue"], seed=11))
    prior.frame.drop(columns=["std"]).to_csv(HERE / "attribution_prior.csv", index=False)


if __name__ == "__main__":
    main()
