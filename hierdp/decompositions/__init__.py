"""Decompositions: what decides the structure. Built-ins are registered through the
``hierdp_register_decompositions`` hook."""

from hierdp.decompositions.base import Decomposition, Structure
from hierdp.decompositions.declared import Declared, DeclaredStructure, build_structure
from hierdp.decompositions.mixed import MixedPrivTree, MixedStructure
from hierdp.decompositions.privtree import PrivTree, SimpleTree, SpatialStructure, UniformGrid
from hierdp.decompositions.suffix_tree import SuffixStructure, SuffixTree
from hierdp.decompositions.taxonomy import TaxonomyPrivTree, TaxonomyStructure
from hierdp.plugins.markers import hookimpl

__all__ = ["Decomposition", "Structure", "Declared", "DeclaredStructure", "build_structure",
           "PrivTree", "SimpleTree", "UniformGrid", "SpatialStructure", "TaxonomyPrivTree", "TaxonomyStructure",
           "MixedPrivTree", "MixedStructure", "SuffixTree", "SuffixStructure"]


@hookimpl
def hierdp_register_decompositions():
    return [Declared, PrivTree, SimpleTree, UniformGrid, TaxonomyPrivTree, MixedPrivTree, SuffixTree]
