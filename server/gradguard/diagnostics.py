"""The finding data model shared by the engine, the CLI and the language server.

Positions are 1-based lines and 1-based columns counted in Unicode code points
(what ``ast`` gives, plus one).  The language server converts to the client's
position encoding; nothing else needs to.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, Sequence


class Severity(str, enum.Enum):
    """Ordered like ruff/LSP: an error is worse than a warning is worse than info."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 3, "warning": 2, "info": 1}[self.value]


@dataclass(frozen=True)
class Span:
    line: int
    column: int
    end_line: int
    end_column: int


@dataclass(frozen=True)
class Related:
    """A location that explains a finding: where the tensor was saved, where backward runs."""

    path: str
    line: int
    column: int
    message: str
    cell: int | None = None  # notebooks: the 1-based cell ``line`` and ``column`` are in


@dataclass(frozen=True)
class TextEdit:
    """Replace the text between two 1-based (line, column) positions."""

    line: int
    column: int
    end_line: int
    end_column: int
    new_text: str
    cell: int | None = None  # notebooks: the 1-based cell the positions are in


@dataclass(frozen=True)
class Fix:
    title: str
    safe: bool
    edits: tuple[TextEdit, ...]
    # Set by a fix of a helper's write that took care of every call of the helper in the file (rebound them, or
    # found that none reads what it passed afterwards): unsafe, if at all, only for calls from other files.
    # Used while fixes are built (``fixes.callers.fix_in_helper``); not part of the JSON.
    callers_checked: bool = field(default=False, compare=False)
    # The file the edits are in when it is not the diagnostic's (the editor's view of a finding placed in another
    # module, ``Finding.placed``), and a digest of the text they were made for (``text_digest``); not in the JSON.
    file: str | None = field(default=None, compare=False)
    base: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Diagnostic:
    path: str
    span: Span
    code: str
    severity: Severity
    message: str
    related: tuple[Related, ...] = ()
    fix: Fix | None = None
    # Notebooks only: the 1-based number of the cell (counting every cell, markdown too, so
    # ``cells[cell - 1]`` in the .ipynb); ``span`` is then in that cell's own lines.
    cell: int | None = None
    # What a baseline recognises the finding by (``baseline.fingerprinted``); None for input problems.  Not in
    # ``to_json``: the result cache stores it beside.  Equal findings stay equal whether or not it is set.
    fingerprint: str | None = field(default=None, compare=False)

    @property
    def line(self) -> int:
        return self.span.line

    def with_fix(self, fix: Fix | None) -> Diagnostic:
        """This diagnostic carrying ``fix`` (itself when there is none)."""
        return replace(self, fix=fix) if fix is not None else self

    @property
    def place(self) -> tuple[str, int, int]:
        """What the diagnostic is known by in its file (or cell): its code and where it starts."""
        return self.code, self.span.line, self.span.column

    @property
    def order(self) -> tuple[str, int, int, int, str]:
        """The order diagnostics are reported in: by file, cell, line, column, code."""
        return self.path, self.cell or 0, self.span.line, self.span.column, self.code

    def to_json(self) -> dict[str, Any]:
        """The stable JSON shape of ``gradguard check --format json`` (schema version 1).

        ``cell`` (and a related location's or an edit's ``cell``) appears only for notebooks.
        """
        out: dict[str, Any] = {"path": self.path}
        if self.cell is not None:
            out["cell"] = self.cell
        return out | {
            "line": self.span.line,
            "column": self.span.column,
            "end_line": self.span.end_line,
            "end_column": self.span.end_column,
            "code": self.code,
            "severity": self.severity.value,
            "message": self.message,
            # vars, not asdict (which deep-copies): the fields are all scalars, and the server converts every
            # finding at every keystroke.
            "related": [_without_no_cell(dict(vars(r))) for r in self.related],
            "fix": None
            if self.fix is None
            else {
                "title": self.fix.title,
                "safe": self.fix.safe,
                "edits": [_without_no_cell(dict(vars(e))) for e in self.fix.edits],
            },
        }


    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Diagnostic":
        """The inverse of ``to_json`` (the result cache stores diagnostics this way)."""
        fix = data.get("fix")
        return cls(
            data["path"],
            Span(data["line"], data["column"], data["end_line"], data["end_column"]),
            data["code"],
            Severity(data["severity"]),
            data["message"],
            tuple(Related(**r) for r in data.get("related", ())),
            None if fix is None else Fix(fix["title"], fix["safe"], tuple(TextEdit(**e) for e in fix["edits"])),
            data.get("cell"),
            data.get("fingerprint"),
        )


def _without_no_cell(fields: dict[str, Any]) -> dict[str, Any]:
    """Drop ``cell`` outside notebooks; in a notebook put it right after ``path`` (or first), as in a diagnostic."""
    cell = fields.pop("cell", None)
    if cell is None:
        return fields
    out: dict[str, Any] = {}
    for key, value in fields.items():
        out[key] = value
        if key == "path":
            out["cell"] = cell
    return out if "cell" in out else {"cell": cell, **out}


# Codes of diagnostics that are about the input, not about torch.
SYNTAX_ERROR = "GG900"
UNREADABLE = "GG901"
# A part of the file was skipped (nested deeper than gradguard analyses, or too costly to follow); the rest
# was analysed.  An error, like the others: code that was not checked must not pass as checked.
NOT_ANALYSED = "GG903"


class FixSource(Protocol):
    """Builds the fixes of one analysis's findings when they are asked for (``api.FixesOnDemand``)."""

    def fixed(self, diagnostics: Sequence[Diagnostic]) -> list[Diagnostic]:
        """``diagnostics`` (of that analysis) with their fixes, as an analysis that builds them gives them."""
        ...

    def checked(self, diagnostics: Sequence[Diagnostic]) -> list[Diagnostic]:
        """``fixed``, keeping only the fixes the fix planner would apply alone (an editor's quick fix)."""
        ...


@dataclass
class FileResult:
    """Everything the analysis says about one file."""

    path: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    # Set when the file could not be analysed at all (unreadable, binary, syntax error);
    # the reason is also one diagnostic in ``diagnostics``.
    error: str | None = None
    # Set when it was analysed without building fixes (the language server's diagnostics): how to build them.
    fixes: FixSource | None = field(default=None, compare=False, repr=False)
