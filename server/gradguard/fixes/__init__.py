"""The edit toolkit each rule's ``fix`` hook builds its ``Fix`` with: the text <-> ast <-> libcst bridge
(``context``), edits (``edits``), rewrite forms and repair recipes that ask the dataflow's facts.  Choosing,
building on demand and applying fixes is ``gradguard.autofix``'s (``autofix.build.Fixer`` asks each finding's rule).
"""

from __future__ import annotations

import functools
import importlib

from .context import CannotFix, FixBuilder, FixContext
from .identity import FindingId, StillFound, Variant

__all__ = ["CannotFix", "FindingId", "FixBuilder", "FixContext", "StillFound", "Variant", "unavailable"]

NO_LIBCST = "libcst is not installed (pip install libcst)"


@functools.cache
def unavailable() -> str | None:
    """Why no fix can be built in this interpreter (None when fixes work).  Fixes are libcst codemods, and an
    environment may lack libcst (VS Code's bundle leaves it to the user's interpreter): the clients say so once
    instead of offering fewer fixes without a word."""
    try:
        importlib.import_module("libcst")
    except ImportError:
        return NO_LIBCST
    return None
