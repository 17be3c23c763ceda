"""``--format github``: GitHub Actions workflow commands, which become PR annotations.

Escaping follows the Actions toolkit (``@actions/core`` ``command.ts``): ``%``,
CR and LF in the message; additionally ``:`` and ``,`` in property values,
since those separate the properties.
"""

from __future__ import annotations

from typing import Sequence

from ..diagnostics import Diagnostic, Severity
from . import RuleInfo

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
    message = "\n".join([d.message, *(f"{r.path}:{r.line}:{r.column}: note: {r.message}" for r in d.related)])
    rendered = ",".join(f"{k}={escape_property(str(v))}" for k, v in props.items())
    return f"::{COMMANDS[d.severity]} {rendered}::{escape_data(message)}"


def render(diagnostics: Sequence[Diagnostic], rules: Sequence[RuleInfo] = ()) -> str:
    return "".join(command(d) + "\n" for d in diagnostics)
