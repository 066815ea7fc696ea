"""The exception hierarchy of hierdp.

Every error a user can cause derives from :class:`HierDPError`, carries a one-line
message that names the problem and the fix, and pickles (so it survives process pools).
"""

from __future__ import annotations

import difflib
import os
import sys
import warnings
from collections.abc import Iterable

__all__ = [
    "HierDPError",
    "SpecError",
    "HierarchyError",
    "BudgetError",
    "PluginError",
    "PrivacyError",
    "DataError",
    "MissingDependencyError",
    "UnknownKeywordError",
    "NotForPublicationWarning",
    "NonPrivateWarning",
    "UntrustedJournalWarning",
    "did_you_mean",
    "warn",
]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


class HierDPError(Exception):
    """Base class of every error hierdp raises on bad input."""


class HierarchyError(HierDPError, ValueError):
    """The declared hierarchy or its public domains are invalid."""


class DataError(HierDPError, ValueError):
    """The private data do not fit the declared structure (bad counts, missing columns)."""


class BudgetError(HierDPError, ValueError):
    """A privacy budget is invalid (non-positive, non-finite, wrong shape, bad split)."""


class PrivacyError(HierDPError, ValueError):
    """A request would break a privacy rule (e.g. Gaussian noise under pure epsilon)."""


class PluginError(HierDPError, LookupError):
    """A plugin name is unknown, duplicated, or a plugin misbehaves."""


class SpecError(HierDPError, ValueError):
    """A release spec is invalid; ``errors`` holds every problem found."""

    def __init__(self, message: str, errors: list[str] | None = None) -> None:
        super().__init__(message)
        self.errors = list(errors) if errors is not None else [message]

    def __reduce__(self) -> tuple[type, tuple[str, list[str]]]:  # keep `errors` when pickled
        return (type(self), (self.args[0], self.errors))


class UnknownKeywordError(HierDPError, TypeError):
    """A door or function was given a keyword it does not take; the message names it and
    the closest keyword it does take."""


class MissingDependencyError(HierDPError, ImportError):
    """An optional dependency is needed; the message names the extra to install."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(
            f"this feature needs the optional package {package!r}; "
            f"install it with: pip install 'hierdp[{extra}]'"
        )
        self.package = package
        self.extra = extra

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.package, self.extra))


class NonPrivateWarning(UserWarning):
    """A computation read true counts (evaluation, oracle budgets)."""


class NotForPublicationWarning(UserWarning):
    """A release used seeded (reproducible) randomness: fine for tests and benchmarks,
    never for publication (its ledger and written tables say so)."""


class UntrustedJournalWarning(UserWarning):
    """A file in an output folder is named like a hierdp commit journal but hierdp did not
    write it (wrong owner, writable by others, names files outside its folder, ...): it is
    left alone, not followed (see ``docs/security.md``)."""


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """Return ``"; did you mean 'x'?"`` for the closest choice, or ``""``."""
    match = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"; did you mean {match[0]!r}?" if match else ""


def expected_one_of(kind: str, name: object, choices: Iterable[str]) -> str:
    """Message: unknown <kind> 'name'; expected one of 'a', 'b' (did you mean ...)."""
    choices = sorted(str(c) for c in choices)
    listed = ", ".join(repr(c) for c in choices) if choices else "(none registered)"
    return f"unknown {kind} {name!r}; expected one of {listed}{did_you_mean(str(name), choices)}"


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """Issue a warning that points at the caller's line: the first frame outside hierdp.

    :func:`warnings.warn`'s ``stacklevel`` counts frames, and the number of hierdp frames
    between the user and the warning depends on the door used (accessor, spec, functional
    API); this walks the stack instead, so ``NotForPublicationWarning`` names the user's
    script and line, not ``hierdp/pipeline.py``.

    Parameters
    ----------
    message : str
        The warning's text (never a true count).
    category : type of Warning, default UserWarning
        The warning class.
    """
    frame = sys._getframe(1)
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    warnings.warn(message, category, stacklevel=level + 1)
