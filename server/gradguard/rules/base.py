"""What every rule declares: a stable code, a name, its docs and runnable examples.

A rule module defines one ``Rule`` instance named ``RULE``.  The engine emits
typed events (see ``gradguard.inference.events``); ``Rule.check`` turns the
events it cares about into findings.  Examples are whole programs: the test
suite runs each INVALID one with torch and checks that it raises (or changes
gradients), runs each VALID one clean, and checks that the analyzer agrees.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

from ..diagnostics import Severity

if TYPE_CHECKING:  # pragma: no cover
    from ..diagnostics import Fix
    from ..fixes.context import FixContext
    from ..inference.events import Event, Finding


@dataclass(frozen=True)
class Example:
    code: str
    # For INVALID examples: the start of the first line of torch's RuntimeError,
    # or None when the bug is silent (wrong gradients).
    raises: str | None = None


@dataclass(frozen=True)
class Rule:
    code: str  # "GG001"
    name: str  # "saved-tensor-mutated"
    summary: str  # one line, for `gradguard rules`
    explanation: str  # markdown: what torch does and why
    fix_advice: str  # markdown: how to rewrite it
    default_severity: Severity
    check: Callable[["Event"], Iterable["Finding"]]
    valid: tuple[Example, ...] = ()
    invalid: tuple[Example, ...] = ()
    when_wrong: str = ""  # markdown: when the rule can be wrong
    # The code fix for one finding (a libcst codemod, see ``gradguard.fixes``), or None when there is none
    # for that code.  Called only for files that have findings; may raise ``fixes.CannotFix``.
    fix: Callable[["FixContext", "Finding"], "Fix | None"] | None = None

    def docs(self) -> str:
        """The rule's documentation as markdown (printed by `gradguard rule CODE`)."""
        parts = [
            f"# {self.code} {self.name}",
            "",
            self.summary,
            "",
            "## What torch does",
            "",
            self.explanation.strip(),
            "",
        ]
        for title, examples in (("Flagged", self.invalid), ("Not flagged", self.valid)):
            for example in examples:
                parts += [f"## {title}", "", "```python", example.code.strip(), "```", ""]
                if example.raises:
                    parts += [f"torch raises: `RuntimeError: {example.raises}...`", ""]
        parts += ["## How to fix it", "", self.fix_advice.strip(), ""]
        if self.when_wrong:
            parts += ["## When the rule can be wrong", "", self.when_wrong.strip(), ""]
        parts += [
            "## Suppressing it",
            "",
            f"Add `# gradguard: ignore[{self.code}]` (or `# noqa: {self.code}`) to the flagged line, "
            f'or list `"{self.code}"` under `ignore` in `[tool.gradguard]`.',
            "",
        ]
        return "\n".join(parts)
