"""``--format github``: GitHub Actions workflow commands, which become PR annotations.

Escaping follows the Actions toolkit (``@actions/core`` ``command.ts``): ``%``,
CR and LF in the message; additionally ``:`` and ``,`` in property values,
since those separate the properties.

A notebook's line and column are in its cell (GitHub has no notion of cells), so the message starts with
``cell N:``; the annotation is attached to the notebook file.
"""

from __future__ import annotations

from typing import Sequence

from ..diagnostics import Diagnostic, Severity
from . import RuleInfo
from .text import location

COMMANDS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(d: Diagnostic) -> str:
    props = {
        "file": d.path,
        "line": d.span.line,
        "col": d.span.column,
        "endLine": d.span.end_line,
        "endColumn": d.span.end_column,
        "title": d.code,
    }
    notes = [f"{location(r.path, r.line, r.column, r.cell)}: note: {r.message}" for r in d.related]
    message = "\n".join([d.message if d.cell is None else f"cell {d.cell}: {d.message}", *notes])
    rendered = ",".join(f"{k}={escape_property(str(v))}" for k, v in props.items())
    return f"::{COMMANDS[d.severity]} {rendered}::{escape_data(message)}"


def render(diagnostics: Sequence[Diagnostic], rules: Sequence[RuleInfo] = ()) -> str:
    return "".join(command(d) + "\n" for d in diagnostics)


def render_runs(diagnostics: Sequence[Diagnostic], rules: Sequence[RuleInfo], runs) -> str:
    """The findings, then a warning annotation for each file the probe did not run to its end (a notice for
    the others)."""
    lines = [command(d) for d in diagnostics]
    for run in runs:
        props = {"file": run.path, "title": f"gradguard probe: {run.outcome}"}
        if run.line:
            props["line"] = run.line
        rendered = ",".join(f"{k}={escape_property(str(v))}" for k, v in props.items())
        kind = "notice" if run.passes else "warning"
        lines.append(f"::{kind} {rendered}::{escape_data('probe: ' + run.detail)}")
    return "".join(line + "\n" for line in lines)
