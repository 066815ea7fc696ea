"""A geography from a public list of GEOIDs by prefix lengths (issue 51 item 1, in Python):
``Tree.from_geoids``, checked against a brute-force build from the prefixes, and the one-line
errors for what cannot be a GEOID list."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import hierdp
from hierdp.errors import HierarchyError

LEVELS = {"State": 2, "County": 5, "Tract": 11, "Block": 15}


def _blocks(rng: np.random.Generator) -> list[str]:
    out = set()
    while len(out) < 400:
        st = rng.choice(["01", "02", "56"])
        out.add(f"{st}{rng.integers(1, 4) * 2 - 1:03d}{rng.integers(100, 103):06d}{rng.integers(1000, 1030):04d}")
    return sorted(out, key=lambda g: rng.random())  # any order


def test_the_tree_of_a_block_list_is_the_tree_of_its_prefixes() -> None:
    geoids = _blocks(np.random.default_rng(1))
    t = hierdp.Tree.from_geoids(geoids, LEVELS, root="US")
    assert t.level_names == ("US", "State", "County", "Tract", "Block")
    # brute force: the distinct prefixes per level, each node's parent the prefix one level up
    frame = pd.DataFrame({name: [g[:n] for g in geoids] for name, n in LEVELS.items()})
    ref = hierdp.Tree.from_frame(frame, levels=list(LEVELS), domains=frame, root="US")
    assert t.n_nodes == ref.n_nodes == 1 + sum(len(set(frame[c])) for c in frame)
    for d in range(1, 5):
        assert sorted(t.level_labels(d)) == sorted(ref.level_labels(d))
    # the same nodes with the same paths as the brute force (each node's path: its ancestors' labels)
    def paths(tree: hierdp.Tree) -> set[tuple]:
        cols = pd.DataFrame({k: pd.Series(v).astype(object) for k, v in tree.label_columns().items()})
        return set(cols.where(cols.notna(), None).itertuples(index=False, name=None))

    got = paths(t)
    assert got == paths(ref)
    for row in got:  # each label extends its parent's; leading zeros kept ("01..." stays text)
        kept = [x for x in row if x is not None]
        assert all(b.startswith(a) and len(b) == n for a, b, n in zip(kept, kept[1:], list(LEVELS.values())[1:]))
    assert set(t.level_labels("Block")) == set(geoids)
    # a release on it: records carry only the GEOID; the level columns are its prefixes
    people = pd.DataFrame({"GEOID": np.random.default_rng(2).choice(geoids, 3000)})
    cols = people.assign(**{name: people["GEOID"].str[:n] for name, n in LEVELS.items()})
    r = cols.dptree(levels=list(LEVELS), domains=frame, root="US").release(epsilon=1.0, seed=3)
    assert r.tree.n_nodes == t.n_nodes


@pytest.mark.parametrize("geoids, levels, match", [
    (["01001"], {"State": 2, "County": 2}, "does not nest under the level above"),
    (["01001"], {"State": 0, "County": 5}, "a prefix length is a positive integer"),
    (["01001", "0100"], {"State": 2, "County": 5}, r"1 GEOID\(s\) are not 5 characters long.*'0100'"),
    (["01001", "01001"], {"State": 2, "County": 5}, "GEOID '01001' appears more than once"),
    ([1001, 1003], {"State": 2, "County": 5}, "GEOIDs must be text, got int 1001"),
    ([], {"State": 2, "County": 5}, "the list of GEOIDs is empty"),
    (["01001"], {}, "levels must map each level's name to its prefix length"),
])
def test_what_cannot_be_a_geoid_list_is_one_line(geoids, levels, match) -> None:
    with pytest.raises(HierarchyError, match=match):
        hierdp.Tree.from_geoids(geoids, levels)
