"""What the engine and the Generation Matrix read of a tree, as a protocol.

:class:`hierdp.Tree` satisfies it. Modules below the tree in the layering (the engine,
:mod:`hierdp.generation_matrix`) annotate with :class:`TreeLike` instead of importing
:mod:`hierdp.tree`, so that the tree may call them without an import cycle.
"""

from __future__ import annotations

from typing import Any, Protocol


class TreeLike(Protocol):
    """A tree in hierdp's internal order: public structure only (see :class:`hierdp.Tree`)."""

    @property
    def n_nodes(self) -> int: ...

    @property
    def n_leaves(self) -> int: ...

    @property
    def height(self) -> int: ...

    @property
    def internal(self) -> Any: ...

    @property
    def cache(self) -> dict[str, Any]: ...
