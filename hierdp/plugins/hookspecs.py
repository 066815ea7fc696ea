"""Hook specifications of hierdp.

Every hook is prefixed ``hierdp_`` and called with keyword arguments. ``register_*``
hooks take no arguments and return a list of classes, each with a unique lowercase
``name`` attribute; the registry collects the lists of every plugin into one dict per
kind and refuses a name that two plugins provide (naming both).

Privacy boundary: none of these hooks receives private data. Mechanisms see true counts
only inside :meth:`hierdp.mechanisms.base.Mechanism.sample`; post-processors receive
noisy measurements and the public tree only; metrics are evaluation tools (non-private by
nature) and are documented as such.
"""

from __future__ import annotations

from hierdp.plugins.markers import hookspec


@hookspec
def hierdp_register_mechanisms() -> list[type]:
    """Mechanism classes (subclasses of :class:`hierdp.mechanisms.base.Mechanism`)."""


@hookspec
def hierdp_register_postprocessors() -> list[type]:
    """Post-processor classes (subclasses of :class:`hierdp.postprocessors.base.PostProcessor`)."""


@hookspec
def hierdp_register_metrics() -> list[type]:
    """Metric classes (subclasses of :class:`hierdp.metrics.base.Metric`)."""


@hookspec
def hierdp_register_budgets() -> list[type]:
    """Budget strategy classes (subclasses of :class:`hierdp.budgets.base.BudgetStrategy`)."""


@hookspec
def hierdp_register_plans() -> list[type]:
    """Measurement plan classes (subclasses of :class:`hierdp.plans.base.Plan`): how a
    release measures a structure within its budget (built-in: ``per_level``)."""


@hookspec
def hierdp_register_decompositions() -> list[type]:
    """Decomposition classes (subclasses of :class:`hierdp.decompositions.base.Decomposition`):
    what decides the structure (built-in: ``declared``)."""


@hookspec
def hierdp_register_executors() -> list[type]:
    """Executor classes (subclasses of :class:`hierdp.execution.Executor`, or any class with a
    ``map(function, tasks)`` method yielding results in task order): where the tasks of a split
    release run (built-in: ``inline``, ``threads``)."""
