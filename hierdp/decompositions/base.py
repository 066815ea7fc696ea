"""The decomposition interface: what decides the structure a release measures.

A decomposition turns its parameters (and, for data-dependent ones, the private data)
into a :class:`Structure`: the public :class:`~hierdp.tree.Tree` plus what a front-end
needs to place records on it. Declared domains (``declared``) read no private data
except values the user asserted public (``observed``). A data-dependent decomposition
(PrivTree, suffix trees: roadmap) reads the data to choose the tree: then the tree is a
private output, its ``spends`` are paid from the release's budget and the ledger says so.

Third-party decompositions register through ``hierdp_register_decompositions`` and run
:class:`hierdp.testing.BaseDecompositionTests`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from hierdp.rng import RandomSource
    from hierdp.tree import Tree

__all__ = ["Decomposition", "Structure"]


@dataclass
class Structure:
    """The outcome of a decomposition.

    ``tree``: the structure (public, or a private output paid for in ``spends``);
    ``spends``: :class:`hierdp.accounting.Spend` items the decomposition made (empty for a
    declared structure); ``private_structure``: whether the tree itself depends on private
    data beyond values asserted public; ``level_provenance``: where each level came from,
    when the tree does not say it itself.
    """

    tree: Tree
    spends: list[Any] = field(default_factory=list)
    private_structure: bool = False
    level_provenance: dict[str, str] | None = None

    @property
    def provenance(self) -> dict[str, str]:
        """Where each level of the structure came from (for the ledger)."""
        return dict(self.level_provenance) if self.level_provenance is not None else self.tree.provenance


class Decomposition(ABC):
    """Base class of decompositions (registered through ``hierdp_register_decompositions``).

    Subclasses set ``name`` and ``data_dependent`` (the structure is chosen from private
    data with a privacy cost) and implement :meth:`decompose`. Parameters are constructor
    keywords.
    """

    name: ClassVar[str]
    data_dependent: ClassVar[bool] = False

    def __init__(self, **params: Any) -> None:
        if params:
            raise TypeError(f"decomposition {self.name!r} takes no parameters, got {sorted(params)}")

    @abstractmethod
    def decompose(self, data: Any = None, *, budget: float | None = None,
                  rng: RandomSource | None = None) -> Structure:
        """The structure for ``data``; a data-dependent decomposition spends ``budget``
        (its own unit) with randomness from ``rng`` and reports it in ``Structure.spends``."""

    def __repr__(self) -> str:
        return f"<decomposition {self.name!r}>"
