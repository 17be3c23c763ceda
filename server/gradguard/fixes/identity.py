"""Which finding a candidate fix must remove, and how the caller of the fixes says whether it still is there: the
fixes never run the engine themselves (``FixContext.still_found``)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ..inference.events import Finding


@dataclass(frozen=True)
class FindingId:
    """Which finding a candidate fix must remove: its code, and the line of the statement its write (or the
    call leading to it) is made on, in the candidate's text."""

    code: str
    line: int
    # The line of the backward it breaks, when known: a candidate that leaves that backward broken by another
    # write of the same code (a forward computed again after one step, and another step before the backward)
    # has not removed the finding, only moved it.
    backward_line: int | None = None
    # The line of the outermost followed call that leads to the write, when the finding is made by the analysis of
    # the function that calls (a helper's step that only its caller's values show): that function is analysed too.
    caller_line: int | None = None

    def lines(self) -> tuple[int, ...]:
        """The lines whose functions are analysed again to look for the finding."""
        return (self.line,) if self.caller_line is None else (self.line, self.caller_line)


# Is the finding still there once the text is ``fixed``?  The caller of the fixes (``api``) answers by analysing
# the changed text again: the fixes never run the engine themselves.
StillFound = Callable[[str, FindingId], bool]
# The caller's analysis of a variant of the text (the same line count: ``wrappers`` replaces a wrapper by the name it
# holds): its tree, its findings and how fixes check candidates against it; None when it does not parse.
Variant = Callable[[str], "tuple[ast.Module, list[Finding], StillFound] | None"]
