"""A synthetic United States of the 2020 P.L. 94-171 persons shape, generated once and cached.

Issue 31 item 7. The facts it reproduces are in ``shared/census/pl94_persons_2020.yaml``
(levels and units per level, the 2,016-cell histogram ``hhgq 8 x votingage 2 x hispanic 2
x cenrace 63``); the data are synthetic (the real ones are confidential):

* **geography**: the 50 states and DC with their real FIPS codes (``"01"`` .. ``"56"``
  without 03, 07, 14, 43, 52) and real 2020 county counts (3,143 in all); tracts
  (~84,414) and block groups (~239,780) in proportion to the 2020 state populations;
  blocks (~8,132,968) half in proportion to population and half to the county count (a
  rurality proxy: blocks follow roads and land, so rural states have far more blocks per
  person; DC gets ~9.5k, the real 2020 count is 6,012). Within a state, county sizes are
  log-normal (heavy-tailed), block groups per tract 1-9 and blocks per block group 1-999
  (log-normal). Codes are strings with leading zeros as in Census GEOIDs: state 2 digits,
  county 3 (odd: 001, 003, ...), tract 6 (000100, 000200, ...), block group 1 (1-9),
  block 4 (its block group's digit then 3 digits), so the block ``GEOID = state + county
  + tract + block`` (15 characters, as the Census's) and every unit's GEOID is a prefix
  of its blocks' (state 2, county 5, tract 11, block group 12 characters).
* **persons**: 331,449,281 split over states in proportion to their 2020 populations, one
  multinomial per state over its blocks: about a third of the blocks empty, the others with
  log-normal weights (heavy-tailed block populations; tract totals near-equal as the
  Census draws them).
* **histogram**: one cell per person from block-level profiles (mostly White, Black,
  Hispanic or Asian neighbourhoods mixed with the state's population), so most persons
  fall in a few dozen ``cenrace`` cells (the six races alone and the common two-race
  combinations) and the rare combinations are rare; ~22% under 18; ~19% Hispanic; ~2.5%
  in group quarters over 7 types, concentrated in a few blocks (prisons, dormitories,
  nursing homes, barracks) as they are. ``cenrace`` index ``r`` is the ``r``-th non-empty
  subset of (White, Black, AIAN, Asian, NHPI, Some other race) by size, then
  lexicographically (the Census order: 6 single races, 15 pairs, 20, 15, 6, 1). Cell
  ``((hhgq * 2 + votingage) * 2 + hispanic) * 63 + cenrace`` (row-major), ``votingage``
  0 = under 18, ``hispanic`` 1 = Hispanic, ``hhgq`` 0 = household, 1-4 institutional
  (correctional, juvenile, nursing, other), 5-7 non-institutional (college, military,
  other).

Written per state under ``DATA/state=SS/`` (seeded: one random stream per state from
``SeedSequence(seed).spawn``, so a state is the same whether generated alone or with the
others, and the folder records the seed and version in ``DATA/meta.json``):

* ``geography.parquet`` — the public tree: one row per block (empty ones included),
  columns ``state, county, tract, block_group, block, geoid``, sorted by ``geoid``;
* ``counts.parquet`` — the private pre-aggregated counts: one row per non-zero (block,
  cell), columns ``geoid`` (dictionary-encoded), ``block`` (the block's row in
  ``geography.parquet``), ``hhgq, votingage, hispanic, cenrace, count``; sorted by block;
* with ``--records``, ``records.parquet``: one row per person (``geoid, hhgq, votingage,
  hispanic, cenrace``), the input of a dataset door.

Vectorised: per state one multinomial over its blocks, per person a handful of array
operations, counts by one sort (persons of a few million at a time, so memory stays far
below 2 GB); no Python loop per block or person. ::

    PYTHONPATH=. python benchmarks/census_us_data.py --states 56            # Wyoming
    PYTHONPATH=. python benchmarks/census_us_data.py --us                   # all 51 (cached)
    PYTHONPATH=. python benchmarks/census_us_data.py --states 11 --records  # + one row per person
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: bump when the generator's output changes (a cached folder of another version is refused)
VERSION = 1
DEFAULT_SEED = 2020
LEVELS = ("US", "State", "County", "Tract", "Block_Group", "Block")
DIMS = (("hhgq", 8), ("votingage", 2), ("hispanic", 2), ("cenrace", 63))
N_CELLS = 8 * 2 * 2 * 63
TARGETS = {"counties": 3143, "tracts": 84414, "block_groups": 239780, "blocks": 8132968,
           "persons": 331449281}

#: FIPS, postal code, 2020 resident population, counties (county equivalents) in 2020
STATES: tuple[tuple[str, str, int, int], ...] = (
    ("01", "AL", 5024279, 67), ("02", "AK", 733391, 30), ("04", "AZ", 7151502, 15),
    ("05", "AR", 3011524, 75), ("06", "CA", 39538223, 58), ("08", "CO", 5773714, 64),
    ("09", "CT", 3605944, 8), ("10", "DE", 989948, 3), ("11", "DC", 689545, 1),
    ("12", "FL", 21538187, 67), ("13", "GA", 10711908, 159), ("15", "HI", 1455271, 5),
    ("16", "ID", 1839106, 44), ("17", "IL", 12812508, 102), ("18", "IN", 6785528, 92),
    ("19", "IA", 3190369, 99), ("20", "KS", 2937880, 105), ("21", "KY", 4505836, 120),
    ("22", "LA", 4657757, 64), ("23", "ME", 1362359, 16), ("24", "MD", 6177224, 24),
    ("25", "MA", 7029917, 14), ("26", "MI", 10077331, 83), ("27", "MN", 5706494, 87),
    ("28", "MS", 2961279, 82), ("29", "MO", 6154913, 115), ("30", "MT", 1084225, 56),
    ("31", "NE", 1961504, 93), ("32", "NV", 3104614, 17), ("33", "NH", 1377529, 10),
    ("34", "NJ", 9288994, 21), ("35", "NM", 2117522, 33), ("36", "NY", 20201249, 62),
    ("37", "NC", 10439388, 100), ("38", "ND", 779094, 53), ("39", "OH", 11799448, 88),
    ("40", "OK", 3959353, 77), ("41", "OR", 4237256, 36), ("42", "PA", 13002700, 67),
    ("44", "RI", 1097379, 5), ("45", "SC", 5118425, 46), ("46", "SD", 886667, 66),
    ("47", "TN", 6910840, 95), ("48", "TX", 29145505, 254), ("49", "UT", 3271616, 29),
    ("50", "VT", 643077, 14), ("51", "VA", 8631393, 133), ("53", "WA", 7705281, 39),
    ("54", "WV", 1793716, 55), ("55", "WI", 5893718, 72), ("56", "WY", 576851, 23),
)
FIPS = tuple(s[0] for s in STATES)


def _largest_remainder(total: int, weights: np.ndarray, floor: int = 0) -> np.ndarray:
    """Integers >= ``floor`` in proportion to ``weights`` that add up to ``total`` exactly."""
    w = np.asarray(weights, dtype=np.float64)
    rest = total - floor * w.size
    q = w / w.sum() * rest
    out = np.floor(q).astype(np.int64)
    short = int(rest - out.sum())
    out[np.argsort(-(q - out), kind="stable")[:short]] += 1
    return out + floor


@dataclass(frozen=True)
class StatePlan:
    """The sizes of one state: its units per level and persons (fixed by the US totals)."""

    fips: str
    postal: str
    counties: int
    tracts: int
    block_groups: int
    blocks: int
    persons: int


def state_plans() -> dict[str, StatePlan]:
    """Every state's sizes; the US sums are the P.L. 94 geography counts (the targets)."""
    pop = np.array([s[2] for s in STATES], dtype=np.float64)
    cty = np.array([s[3] for s in STATES], dtype=np.int64)
    assert int(cty.sum()) == TARGETS["counties"]
    tracts = _largest_remainder(TARGETS["tracts"] - int(cty.sum()), pop) + cty  # >= 1 tract per county
    bgs = _largest_remainder(TARGETS["block_groups"] - int(tracts.sum()), pop) + tracts
    rural = 0.5 * pop / pop.sum() + 0.5 * cty / cty.sum()
    blocks = _largest_remainder(TARGETS["blocks"] - int(bgs.sum()), rural) + bgs
    persons = _largest_remainder(TARGETS["persons"], pop)
    return {s[0]: StatePlan(s[0], s[1], int(c), int(t), int(g), int(b), int(p))
            for s, c, t, g, b, p in zip(STATES, cty, tracts, bgs, blocks, persons)}


def _children(rng: np.random.Generator, n_parents: int, n_children: int, sigma: float, cap: int) -> np.ndarray:
    """Children per parent: at least 1 and at most ``cap`` each, ``n_children`` in all (as
    far as the cap allows), the extra ones spread with log-normal weights (heavy tail)."""
    n_children = min(max(n_children, n_parents), n_parents * cap)
    w = rng.lognormal(0.0, sigma, n_parents)
    fan = 1 + rng.multinomial(n_children - n_parents, w / w.sum())
    over = fan > cap
    while over.any():  # give the excess of capped parents to the others (rare; a few passes)
        excess = int((fan[over] - cap).sum())
        fan[over] = cap
        room = np.flatnonzero(fan < cap)
        ww = w[room] / w[room].sum()
        fan[room] += rng.multinomial(excess, ww)
        over = fan > cap
    return fan


def _rank_in_runs(fan: np.ndarray) -> np.ndarray:
    """0, 1, ... within each run of ``fan`` consecutive items."""
    starts = np.repeat(np.cumsum(fan) - fan, fan)
    return np.arange(int(fan.sum())) - starts


def _codes(values: np.ndarray, width: int) -> np.ndarray:
    """Non-negative integers as zero-padded strings of ``width`` characters."""
    return np.char.zfill(values.astype(np.int64).astype(f"U{width}"), width)


# -- the cell model --------------------------------------------------------------------------------

RACES = ("White", "Black", "AIAN", "Asian", "NHPI", "SOR")
CENRACE = tuple(c for k in range(1, 7) for c in itertools.combinations(range(6), k))  # 63 subsets, Census order
assert len(CENRACE) == 63


def _race_weights(alone: dict[int, float], pairs: dict[tuple[int, int], float], multi: float) -> np.ndarray:
    """A distribution over the 63 ``cenrace`` cells: single races, named pairs, and
    ``multi`` spread over the remaining combinations (decreasing with their size)."""
    w = np.zeros(63)
    for i, c in enumerate(CENRACE):
        if len(c) == 1:
            w[i] = alone.get(c[0], 0.0)
        elif len(c) == 2:
            w[i] = pairs.get(c, 0.0)
    rest = np.array([0.0 if len(c) == 1 or (len(c) == 2 and c in pairs) else 0.2 ** len(c) for c in CENRACE])
    w += multi * rest / rest.sum()
    w = np.maximum(w, 1e-7)  # every combination occurs somewhere
    return w / w.sum()


def _profiles() -> np.ndarray:
    """Four neighbourhood profiles (mostly White, Black, Hispanic, Asian), each a
    distribution over the 126 (hispanic, cenrace) cells, hispanic-major."""
    nh = {  # non-Hispanic race distributions per profile
        "white": _race_weights({0: 0.90, 1: 0.03, 2: 0.008, 3: 0.02, 4: 0.001, 5: 0.004},
                               {(0, 1): 0.008, (0, 2): 0.008, (0, 3): 0.007, (0, 5): 0.004}, 0.004),
        "black": _race_weights({0: 0.12, 1: 0.82, 2: 0.004, 3: 0.01, 4: 0.001, 5: 0.006},
                               {(0, 1): 0.02, (1, 2): 0.004, (1, 5): 0.003}, 0.006),
        "asian": _race_weights({0: 0.30, 1: 0.05, 2: 0.003, 3: 0.58, 4: 0.01, 5: 0.005},
                               {(0, 3): 0.03, (3, 4): 0.008, (0, 1): 0.004}, 0.01),
    }
    hisp = _race_weights({0: 0.20, 1: 0.02, 2: 0.012, 3: 0.003, 4: 0.001, 5: 0.42},
                         {(0, 5): 0.25, (0, 2): 0.02, (1, 5): 0.01, (2, 5): 0.01}, 0.05)
    # (share Hispanic, non-Hispanic race distribution) per profile
    spec = ((0.07, nh["white"]), (0.05, nh["black"]), (0.80, 0.6 * nh["white"] + 0.4 * nh["black"]),
            (0.08, nh["asian"]))
    out = np.empty((4, 126))
    for p, (h, race) in enumerate(spec):
        out[p, :63] = (1 - h) * race
        out[p, 63:] = h * hisp
    return out


PROFILES = _profiles()
PROFILE_US = np.array([0.60, 0.125, 0.205, 0.07])  # population share of each profile, about the US 2020 mix
UNDER18 = np.array([0.20, 0.23, 0.28, 0.19])       # share under 18 per profile (household population)
#: group-quarters types 1-7: share of the GQ population, share under 18 in it
GQ_SHARE = np.array([0.25, 0.01, 0.18, 0.03, 0.30, 0.04, 0.19])
GQ_UNDER18 = np.array([0.002, 0.95, 0.0, 0.15, 0.01, 0.0, 0.06])
GQ_BLOCK_P = 0.012   # share of non-empty blocks holding a large group-quarters facility
GQ_IN_BLOCK = 0.75   # share of such a block's persons living in it
GQ_ELSEWHERE = 0.016  # share in group quarters elsewhere (small facilities)
EMPTY_SHARE = 1 / 3


def _persons_cells(rng: np.random.Generator, state_mix: np.ndarray, block_profile: np.ndarray,
                   block_gq: np.ndarray, pop: np.ndarray) -> np.ndarray:
    """The cell of every person of the blocks with populations ``pop`` (block order)."""
    n = int(pop.sum())
    prof = np.repeat(block_profile, pop)
    mix = rng.random(n) < 0.3  # a person like the state at large, not like the neighbourhood
    prof[mix] = np.searchsorted(np.cumsum(state_mix), rng.random(int(mix.sum())) * state_mix.sum(), side="right")
    np.minimum(prof, 3, out=prof)
    cum = np.cumsum(PROFILES, axis=1)
    cum /= cum[:, -1:]
    flat = (cum + np.arange(4)[:, None]).ravel()
    hc = np.searchsorted(flat, rng.random(n) + prof, side="right") - prof * 126
    np.clip(hc, 0, 125, out=hc)
    gq_type = np.repeat(block_gq, pop)  # the block's facility type (0 none)
    p_gq = np.where(gq_type > 0, GQ_IN_BLOCK, GQ_ELSEWHERE)
    in_gq = rng.random(n) < p_gq
    scattered = in_gq & (gq_type == 0)
    gq_type[scattered] = 1 + np.searchsorted(np.cumsum(GQ_SHARE), rng.random(int(scattered.sum())) * GQ_SHARE.sum(),
                                             side="right")
    np.minimum(gq_type, 7, out=gq_type)
    hhgq = np.where(in_gq, gq_type, 0)
    u18 = np.where(hhgq > 0, GQ_UNDER18[np.maximum(hhgq - 1, 0)], UNDER18[prof])
    votingage = (rng.random(n) >= u18).astype(np.int64)
    return ((hhgq * 2 + votingage) * 126 + hc).astype(np.int16)


# -- one state --------------------------------------------------------------------------------------

@dataclass
class StateData:
    """One generated state: the geography (one row per block) and the non-zero counts."""

    geography: dict[str, np.ndarray]   # state, county, tract, block_group, block, geoid (strings)
    block: np.ndarray                  # per count row: the block's row in the geography
    cell: np.ndarray                   # per count row: the cell (0..2015)
    count: np.ndarray                  # per count row: persons (> 0)


def generate_state(fips: str, seed: int = DEFAULT_SEED, chunk_persons: int = 4_000_000) -> StateData:
    """One state, from its own random stream (``SeedSequence(seed)`` spawned per FIPS)."""
    plan = state_plans()[fips]
    idx = FIPS.index(fips)
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(len(FIPS))[idx])
    # the tree: counties > tracts > block groups > blocks, siblings contiguous, sorted by code
    t_per_c = _children(rng, plan.counties, plan.tracts, 1.3, 10**6)
    g_per_t = _children(rng, int(t_per_c.sum()), plan.block_groups, 0.4, 9)
    b_per_g = _children(rng, int(g_per_t.sum()), plan.blocks, 0.9, 999)
    n_t, n_g, n_b = int(t_per_c.sum()), int(g_per_t.sum()), int(b_per_g.sum())
    county_of_t = np.repeat(np.arange(plan.counties), t_per_c)
    tract_of_g = np.repeat(np.arange(n_t), g_per_t)
    bg_of_b = np.repeat(np.arange(n_g), b_per_g)
    tract_of_b = tract_of_g[bg_of_b]
    county_of_b = county_of_t[tract_of_b]
    county_code = 2 * np.arange(plan.counties) + 1
    tract_code = 100 * (_rank_in_runs(t_per_c) + 1)
    bg_code = _rank_in_runs(g_per_t) + 1
    block_code = 1000 * bg_code[bg_of_b] + _rank_in_runs(b_per_g)
    geo = {"state": np.full(n_b, fips), "county": _codes(county_code[county_of_b], 3),
           "tract": _codes(tract_code[tract_of_b], 6), "block_group": _codes(bg_code[bg_of_b], 1),
           "block": _codes(block_code, 4)}
    # the Census block GEOID (15 characters): the block code's first digit is its block group
    geo["geoid"] = np.char.add(np.char.add(np.char.add(geo["state"], geo["county"]), geo["tract"]), geo["block"])
    # persons per block: near-equal tracts, a third of the blocks empty, log-normal weights
    nonempty = rng.random(n_b) >= EMPTY_SHARE
    first = np.cumsum(g_per_t)[tract_of_g] - g_per_t[tract_of_g]  # keep one non-empty block per tract
    nonempty[np.cumsum(b_per_g)[first] - b_per_g[first]] = True
    w = np.where(nonempty, rng.lognormal(0.0, 1.1, n_b), 0.0)
    tract_w = np.bincount(tract_of_b, w, minlength=n_t)
    w *= rng.lognormal(0.0, 0.25, n_t)[tract_of_b] / tract_w[tract_of_b]
    pop = rng.multinomial(plan.persons, w / w.sum())
    # neighbourhoods: a profile per block from its tract's mix (Dirichlet around the state's)
    state_mix = rng.dirichlet(PROFILE_US * 12)
    tract_mix = rng.gamma(state_mix * 1.5 + 1e-3, size=(n_t, 4))  # a Dirichlet draw per tract
    tract_mix /= tract_mix.sum(axis=1, keepdims=True)
    cum = np.cumsum(tract_mix, axis=1)[tract_of_b]
    block_profile = np.minimum((rng.random(n_b)[:, None] * cum[:, -1:] > cum).sum(axis=1), 3)
    block_gq = np.where(rng.random(n_b) < GQ_BLOCK_P,
                        1 + np.searchsorted(np.cumsum(GQ_SHARE), rng.random(n_b) * GQ_SHARE.sum(), side="right"), 0)
    np.minimum(block_gq, 7, out=block_gq)
    # counts per (block, cell), a few million persons at a time (blocks split at chunk ends)
    ends = np.searchsorted(np.cumsum(pop), np.arange(chunk_persons, int(pop.sum()), chunk_persons))
    bounds = np.unique(np.r_[0, ends, n_b])
    blocks, cells, counts = [], [], []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        cell = _persons_cells(rng, state_mix, block_profile[lo:hi], block_gq[lo:hi], pop[lo:hi])
        key = np.repeat(np.arange(lo, hi, dtype=np.int64), pop[lo:hi]) * N_CELLS + cell
        u, c = np.unique(key, return_counts=True)
        blocks.append((u // N_CELLS).astype(np.int32))
        cells.append((u % N_CELLS).astype(np.int16))
        counts.append(c.astype(np.int32))
    return StateData(geo, np.concatenate(blocks), np.concatenate(cells), np.concatenate(counts))


def split_cell(cell: np.ndarray) -> dict[str, np.ndarray]:
    """``hhgq, votingage, hispanic, cenrace`` of row-major cell indices."""
    cell = np.asarray(cell, dtype=np.int64)
    return {"hhgq": (cell // 252).astype(np.int8), "votingage": (cell // 126 % 2).astype(np.int8),
            "hispanic": (cell // 63 % 2).astype(np.int8), "cenrace": (cell % 63).astype(np.int8)}


# -- the cache on disk -----------------------------------------------------------------------------

def default_data_dir() -> Path:
    return Path(os.environ.get("HIERDP_CENSUS_DATA", Path.home() / ".cache" / "hierdp" / "census_us"))


def state_dir(data: Path, fips: str) -> Path:
    return Path(data) / f"state={fips}"


def _check_meta(data: Path, seed: int) -> None:
    meta = Path(data) / "meta.json"
    want = {"version": VERSION, "seed": seed}
    if meta.exists():
        got = json.loads(meta.read_text())
        if got != want:
            raise SystemExit(f"{data} holds a synthetic US of {got}, not {want}; give another --data folder or "
                             "delete that one")
    else:
        Path(data).mkdir(parents=True, exist_ok=True)
        meta.write_text(json.dumps(want))


def write_state(data: Path, fips: str, sd: StateData, records: bool = False) -> int:
    """Write a generated state (atomically: a temporary folder renamed); bytes on disk."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    final = state_dir(data, fips)
    tmp = final.with_name(final.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    geo = pa.table({k: pa.array(v, type=pa.string()) for k, v in sd.geography.items()})
    pq.write_table(geo, tmp / "geography.parquet")
    dictionary = pa.array(sd.geography["geoid"], type=pa.string())
    parts = split_cell(sd.cell)
    counts = pa.table({"geoid": pa.DictionaryArray.from_arrays(pa.array(sd.block, pa.int32()), dictionary),
                       "block": pa.array(sd.block, pa.int32()),
                       **{k: pa.array(v) for k, v in parts.items()},
                       "count": pa.array(sd.count, pa.int32())})
    pq.write_table(counts, tmp / "counts.parquet")
    if records:
        rows = np.repeat(np.arange(sd.count.size), sd.count)
        rec = pa.table({"geoid": pa.DictionaryArray.from_arrays(pa.array(sd.block[rows], pa.int32()), dictionary),
                        **{k: pa.array(v[rows]) for k, v in parts.items()}})
        pq.write_table(rec, tmp / "records.parquet")
    if final.exists():
        for f in final.iterdir():
            f.unlink()
        final.rmdir()
    os.replace(tmp, final)
    return sum(f.stat().st_size for f in final.iterdir())


def ensure_states(data: Path, fips_list: list[str], seed: int = DEFAULT_SEED, records: bool = False,
                  verbose: bool = True) -> dict[str, float]:
    """Generate the states not yet cached under ``data``; seconds per generated state."""
    _check_meta(data, seed)
    times: dict[str, float] = {}
    for fips in fips_list:
        d = state_dir(data, fips)
        have = d.exists() and (d / "counts.parquet").exists() and (not records or (d / "records.parquet").exists())
        if have:
            continue
        t0 = time.perf_counter()
        sd = generate_state(fips, seed)
        t_gen = time.perf_counter() - t0
        size = write_state(data, fips, sd, records=records)
        times[fips] = time.perf_counter() - t0
        if verbose:
            plan = state_plans()[fips]
            print(f"  state {fips} ({plan.postal}): {sd.geography['geoid'].size:,} blocks, {plan.persons:,} persons, "
                  f"{sd.count.size:,} non-zero (block, cell) rows; generated in {t_gen:.1f} s, written in "
                  f"{times[fips] - t_gen:.1f} s, {size / 2**20:.0f} MiB on disk", flush=True)
    return times


def parse_states(text: str | None, us: bool) -> list[str]:
    """``"56"`` or ``"10,11,56"`` (FIPS or postal codes); every state with ``us``."""
    if us or text is None:
        return list(FIPS)
    postal = {s[1]: s[0] for s in STATES}
    out = []
    for t in text.split(","):
        t = t.strip().upper()
        t = postal.get(t, t.zfill(2))
        if t not in FIPS:
            raise SystemExit(f"--states: {t!r} is not a state FIPS code of the 50 states and DC (e.g. 06 or CA, 11 "
                             "or DC, 56 or WY)")
        out.append(t)
    return sorted(set(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=default_data_dir(), help="cache folder (default %(default)s)")
    ap.add_argument("--states", help="FIPS or postal codes, comma-separated (default: all)")
    ap.add_argument("--us", action="store_true", help="all 50 states and DC")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--records", action="store_true", help="also one row per person (records.parquet)")
    a = ap.parse_args()
    states = parse_states(a.states, a.us)
    t0 = time.perf_counter()
    times = ensure_states(a.data, states, a.seed, a.records)
    size = sum(f.stat().st_size for fips in states for f in state_dir(a.data, fips).iterdir())
    print(f"{len(states)} states ready in {a.data} ({len(times)} generated in {time.perf_counter() - t0:.1f} s); "
          f"{size / 2**30:.2f} GiB on disk")


if __name__ == "__main__":
    main()
