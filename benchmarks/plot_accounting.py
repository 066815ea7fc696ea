"""What the tight accountant buys: per-level noise variance against ε, relative to the
analytic Gaussian optimum (docs/accounting.md).

A 6-level release with an equal split and L2 sensitivity 1 per level, calibrated to
(ε, δ) four ways:

* basic composition: each level its own Gaussian mechanism at (ε/6, δ/6), on the analytic
  curve (the best a per-level (ε, δ) calibration composed by adding ε and δ can do);
* zCDP, Bun & Steinke 2016 conversion (hierdp before issue 34; ``accountant="zcdp"``);
* zCDP, Canonne-Kamath-Steinke 2020 conversion (the discrete Gaussian before its own curve);
* the discrete Gaussian's own exact curve for the split (the ``discrete_gaussian`` mechanism now);
* the analytic Gaussian on the whole release (the ``gaussian`` mechanism now).

Run: ``PYTHONPATH=. python benchmarks/plot_accounting.py`` (writes
docs/_static/accounting_variance.png and prints the table of docs/accounting.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hierdp.accounting.accountants import bs16_rho, cks_rho, discrete_gaussian_rho, gaussian_mu

K = 6
OUT = Path(__file__).resolve().parents[1] / "docs" / "_static" / "accounting_variance.png"


def _discrete_rho(eps: float, delta: float) -> float:
    start = cks_rho(eps, delta)
    rho = discrete_gaussian_rho(eps, delta, [1.0 / K] * K, start=start)
    return start if rho is None else rho


def variances(eps: float, delta: float) -> dict[str, float]:
    """Per-level noise variance σ² under each calibration (σ² = K/(2ρ) = K/μ² for the
    composed ones; (Δ/μ₁)² with μ₁ the single-level analytic μ at (ε/K, δ/K) for basic)."""
    return {
        "basic composition (analytic per level at ε/6, δ/6)": 1.0 / gaussian_mu(eps / K, delta / K) ** 2,
        "zCDP, Bun & Steinke 2016 (hierdp before)": K / (2 * bs16_rho(eps, delta)),
        "zCDP, Canonne-Kamath-Steinke 2020 (discrete Gaussian before)": K / (2 * cks_rho(eps, delta)),
        "analytic Gaussian, Balle & Wang 2018 (gaussian)": K / gaussian_mu(eps, delta) ** 2,
        "exact discrete Gaussian curve (discrete_gaussian)": K / (2 * _discrete_rho(eps, delta)),
    }


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    eps_grid = np.geomspace(0.1, 20.0, 40)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=False)
    for ax, delta in zip(axes, (1e-6, 1e-10)):
        rows = [variances(float(e), delta) for e in eps_grid]
        best = np.array([r["analytic Gaussian, Balle & Wang 2018 (gaussian)"] for r in rows])
        for name in rows[0]:
            ax.semilogx(eps_grid, np.array([r[name] for r in rows]) / best, label=name)
        ax.set_yscale("log")
        ax.set_yticks([1, 1.25, 1.5, 2, 3, 5, 8])
        ax.set_yticklabels(["1", "1.25", "1.5", "2", "3", "5", "8"])
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_title(f"6 levels, equal split, δ = {delta:g}")
        ax.set_xlabel("ε (whole release)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("noise variance per level / analytic Gaussian optimum")
    axes[1].legend(fontsize=7, loc="center right")
    fig.tight_layout()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=110)
    print(f"wrote {OUT}")
    print("| (ε, δ) | basic | zCDP (BS16) | zCDP (CKS20) | analytic | exact discrete | analytic vs BS16 "
          "| exact discrete vs CKS20 |")
    print("|---|---|---|---|---|---|---|---|")
    for eps, delta in ((0.5, 1e-6), (1.0, 1e-6), (4.0, 1e-8), (17.14, 1e-10)):
        v = list(variances(eps, delta).values())
        print(f"| ({eps:g}, {delta:g}) | " + " | ".join(f"{x:.4g}" for x in v) + f" | {1 - v[3] / v[1]:.1%} less "
              f"| {1 - v[4] / v[2]:.1%} less |")


if __name__ == "__main__":
    main()
