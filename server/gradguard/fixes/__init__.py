"""Code fixes: each rule's ``fix`` hook turns a finding into a ``Fix`` (a libcst codemod as text edits).

``attach_fixes`` is the one entry point the analysis calls, and only for a file that has findings: it
builds one ``FixContext`` (libcst is parsed lazily, on the first fix that needs it) and asks each
finding's rule for its fix, through the builders the caller hands down (this layer imports no rule).  A fix that cannot be built -- ``CannotFix``, or any bug in a fix builder --
leaves that diagnostic without a fix; it never loses the diagnostic.

``plan`` chooses and applies fixes for every client (``gradguard.fixing`` for files, notebooks, the
language server's "Fix all"); ``edits`` turns node changes
into ``TextEdit``s and applies them.
"""

from __future__ import annotations

import ast
import functools
import importlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from .callers import fix_in_helper
from .context import CannotFix, FindingId, FixBuilder, FixContext, StillFound

if TYPE_CHECKING:  # pragma: no cover
    from ..diagnostics import Diagnostic
    from ..inference.events import Finding

__all__ = ["CannotFix", "FindingId", "FixBuilder", "FixContext", "StillFound", "attach_fixes", "unavailable"]

log = logging.getLogger(__name__)

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


def attach_fixes(text: str, tree: ast.Module, path: str, pairs: Iterable[tuple[Finding, Diagnostic]],
                 builders: Mapping[str, FixBuilder], still_found: StillFound | None = None) -> list[Diagnostic]:
    """The diagnostics of ``pairs``, each carrying its rule's fix when there is one.  ``builders``: each rule's
    fix by code (the rules sit above this layer, so the caller hands them down); ``still_found``: the caller's
    re-analysis, for fixes that check a candidate against it (see ``FixContext``)."""
    pairs = list(pairs)
    if not pairs:
        return []
    if unavailable() is not None:  # every fix, not just the libcst ones: a partial set would mislead
        return [diag for _, diag in pairs]
    ctx = FixContext(text, tree, path, still_found, builders)
    out = []
    for finding, diag in pairs:
        if finding.fix_memo is not None:  # the engine's per-document cache handed back the same finding
            fix = finding.fix_memo[0]
            for twin in finding.twins:
                twin.fix_memo = finding.fix_memo
            out.append(replace(diag, fix=fix) if fix is not None else diag)
            continue
        build = builders.get(finding.code)
        fix = None
        if build is not None:
            try:
                fix = build(ctx, finding)
            except CannotFix:
                fix = None
            except Exception:
                log.debug("fix for %s at %s:%s failed", finding.code, path, diag.line, exc_info=True)
                fix = None
            if fix is None:  # a write inside a helper the finding's story calls: fixed there, or through its calls
                try:
                    fix = fix_in_helper(build, ctx, finding)
                except Exception:
                    log.debug("helper fix for %s at %s:%s failed", finding.code, path, diag.line, exc_info=True)
                    fix = None
        finding.fix_memo = (fix,)
        for twin in finding.twins:
            twin.fix_memo = finding.fix_memo
        out.append(replace(diag, fix=fix) if fix is not None else diag)
    return out
