"""Probe results as diagnostics, and merged with the static findings of the same file.  No torch.

Merging (``gradguard check --probe``), for each static finding of the probed file:

- the probe saw the same mutation (a probe finding whose line, a caller's line or an origin's line
  is the static finding's line, with a compatible code): **confirmed** -- raised to error, torch's
  message and the probe's related locations added, ``"confirmed": true`` in JSON;
- the probe ran the line and saw no conflict there: **unconfirmed** -- kept as it was, with that
  said in the message, ``"confirmed": false``;
- the probe never reached the line (or could not run): unchanged, no ``confirmed`` key.

Probe findings that no static finding matched are added (``"confirmed": true``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any, Sequence

from ..diagnostics import Diagnostic, Related, Severity, Span
from .model import FAILED, ProbeFinding, ProbeResult, Site

# Codes about mutation confirm one another (the probe sees the write; which rule names it depends on
# how it was written: an element loop GG104 is a GG001/GG003 to torch).  A graph break is its own thing,
# and so is a leaf replaced by a copy made under no_grad (no write at all).
_OWN_FAMILY = ("GG103", "GG109")


def compatible(static_code: str, probe_code: str) -> bool:
    if static_code.startswith("GG9"):
        return False
    if static_code in _OWN_FAMILY or probe_code in _OWN_FAMILY:
        return static_code == probe_code
    return True


def _same_cut(d: Diagnostic, f: ProbeFinding) -> bool:
    """A static GG103 and the probe's GG102 at the same expression (line and column): one ``.data``/``.detach()``
    whose copy is written in part with values that keep the history -- the static rule names the cut graph, the
    probe the silent write's lost gradient."""
    return d.code == "GG103" and f.code == "GG102" and (f.site.line, f.site.column) == (d.span.line, d.span.column) \
        and bool(f.site.column)


@dataclass(frozen=True)
class ProbedDiagnostic(Diagnostic):
    """A diagnostic the probe had a say in.  JSON adds ``confirmed``, ``device``, ``torch_message``.  ``probe``: the
    probe's own finding, for one no static finding matched (its facts are what a fix of it is built from,
    ``gradguard.probed_fixes``); never serialised."""

    confirmed: bool = True
    device: str | None = None
    torch_message: str | None = None
    probe: ProbeFinding | None = field(default=None, compare=False, repr=False)
    # A probe finding placed at the line to change and also reported there, in the file of the static finding it
    # confirmed elsewhere: that finding's code and line (its fix repairs the same conflict); never serialised.
    confirms: tuple[str, int] | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        data = super().to_json()
        data["confirmed"] = self.confirmed
        data["device"] = self.device
        data["torch_message"] = self.torch_message
        return data


def _probed(d: Diagnostic, **changes) -> ProbedDiagnostic:
    """``d`` (every field, whatever Diagnostic grows) as a ProbedDiagnostic, with ``changes``."""
    values = {f.name: getattr(d, f.name) for f in fields(Diagnostic)}
    return ProbedDiagnostic(**(values | changes))


class _Paths:
    """Shows the probed file under the caller's name and other files relative to the cwd."""

    def __init__(self, target: str, display: str):
        self.target = os.path.realpath(target)
        self.display = display

    def __call__(self, path: str) -> str:
        if os.path.realpath(path) == self.target:
            return self.display
        try:
            return os.path.relpath(path)
        except ValueError:
            return path


def _span(site: Site) -> Span:
    column = site.column or 1
    end_line = site.end_line or site.line
    end_column = site.end_column if site.end_column and end_line >= site.line else column
    return Span(site.line, column, end_line, end_column)


def _related(finding: ProbeFinding, show: _Paths) -> list[Related]:
    related = [Related(show(n.site.path), n.site.line, n.site.column or 1, n.message) for n in finding.notes]
    for caller in finding.callers[:3]:
        related.append(Related(show(caller.path), caller.line, caller.column or 1, "reached from this call"))
    return related


def to_diagnostic(finding: ProbeFinding, result: ProbeResult, show: _Paths,
                  confirms: tuple[str, int] | None = None) -> ProbedDiagnostic:
    """A probe finding on its own (``gradguard probe``, or a finding only the probe saw)."""
    return ProbedDiagnostic(
        show(finding.site.path), _span(finding.site), finding.code, Severity(finding.severity),
        finding.message + " (observed by the runtime probe)", tuple(_related(finding, show)),
        confirmed=True, device=result.device, torch_message=finding.torch_message, probe=finding, confirms=confirms)


def diagnostics(result: ProbeResult, display: str) -> list[ProbedDiagnostic]:
    show = _Paths(result.path, display)
    found = [to_diagnostic(f, result, show) for f in result.findings]
    return sorted(found, key=lambda d: d.order)


def _confirmation(finding: ProbeFinding) -> str:
    first = (finding.torch_message or "").split(". Hint:")[0].split("\n")[0]
    if finding.kind == "silent" and finding.code == "GG107":
        return "backward() computed the gradient of the values after the in-place write (not the ones asked for)"
    if finding.kind == "silent" and finding.code == "GG108":
        return "the hook wrote, in place, a gradient tensor torch passes on without a copy"
    if finding.kind == "silent":
        return "backward() used the changed values without an error (wrong gradients)"
    if finding.kind == "starved" and finding.code == "GG109":
        return ("backward() ran through the copy made under no_grad, and the trained parameter it stood for got no "
                "gradient")
    if finding.kind == "starved":
        return "backward() ran, and trained parameters upstream of the cut got no gradient from it"
    if finding.kind == "pending":
        return "a tensor saved for backward was modified; the run ended before a backward used it"
    if finding.kind == "graph-break" and not first:
        return "the value left the graph and came back as a constant"
    return f"torch raises: {first}" if first else "torch raises"


# The first note of a finding the tracer placed at the line to change rather than at the write (the write is then
# a related location): a GG101 placed in the function that calls both the step and the backward (the step runs
# inside a helper), a write through a second name placed at the name (`out = x`), a custom Function's write to
# its input placed at the conversion that returned it, a write inside torch's module placed where it was made.
STEP_NOTE = "the optimizer step that updates the parameters in place"
# A STEP_NOTE finding whose step, or backward, runs inside a helper: the call in the function that runs both.
STEP_CALL_NOTE = "the step runs inside this call"
BACKWARD_CALL_NOTE = "the backward runs inside this call"
ALIAS_NOTE = "the write through the second name"
INPUT_NOTE = "the in-place write to the Function's input"
MODULE_NOTE = "the module that writes in place runs in this call"
# A graph break placed where the values are read out of the graph (`.item()`, `.numpy()`), not where they come back.
REBUILT_NOTE = "the values read out of the graph come back into tensor math here, as a constant"
# A write through a view of a leaf placed where the view is taken, with the write torch refuses as the note.
VIEW_NOTE = "the in-place write through the view, which torch refuses"
# A write to one of several views, in a helper, placed where the views are made.
MULTI_VIEW_NOTE = "the in-place write to one of the views, which torch refuses"
# ... when the views are rows of a leaf that requires grad (a parameter), no view of which may be written with grad on.
LEAF_ROWS_NOTE = "the in-place write to one of the views, rows of a leaf that requires grad, which torch refuses"
# An embedding made with max_norm renormalises its weight in place when called: placed at the earlier use that saved it.
RENORM_NOTE = "the embedding (made with max_norm) renormalises its weight in place in this call"
# A module or parameter replaced, inside a helper, after the optimizer was made: placed at the optimizer.
REPLACED_NOTE = "the helper replaces the module's parameters here, after the optimizer took the old ones"
# ... and, when the optimizer was made in the function that calls the helper, before the call: that call.
REPLACING_CALL_NOTE = "the call that leads to the replacement"
# A write in an accessor method (stores what it is handed into its object's tensor) placed at the caller's call.
SETTER_NOTE = "the method stores the value in place into its object's tensor here"
# A GG101 placed at the step itself when the value used after it was built, in the step's function, on a value that had
# already saved the parameters (recomputing that one line after the step would not help): the use is the first note.
STALE_USE_NOTE = "the graph built after the step takes here a value whose graph saved the parameters before it"
# A GG101 placed at a write into part of a buffer whose other part a graph built after the step reads: that read.
BUFFER_READ_NOTE = "the graph built after the step reads the buffer here"
# A requires_grad write whose own guard skips the parameters it froze (`probe/guarded_freeze.py`): the write is the
# first note; a guard that also skipped parameters frozen elsewhere (which may be meant to stay frozen) says so in a
# later note at the guard.
FROZE_NOTE = "the write that froze them, and the only one that could unfreeze them"
GUARD_SKIPS_OTHERS_NOTE = "the guard also skips parameters frozen elsewhere, which may be meant to stay frozen"
# A dead loss term computed with grad mode off: where the user's code switched it off (a `with torch.no_grad():`), a
# later note of the finding when that is not the term's own line.
GRAD_OFF_NOTE = "grad mode is switched off here"
# Batch norm with training=False handed the input's own statistics, detached (`probe/own_stats.py`): its backward.
OWN_STATS_NOTE = "the backward() that misses the statistics' gradient"
# ... when the variance passed is the one kind only, biased or unbiased (a fact the fix that computes it again reads).
OWN_STATS_BIASED_NOTE = OWN_STATS_NOTE + " (the variance passed is the biased one)"
OWN_STATS_UNBIASED_NOTE = OWN_STATS_NOTE + " (the variance passed is the unbiased one)"
OWN_STATS_NOTES = (OWN_STATS_NOTE, OWN_STATS_BIASED_NOTE, OWN_STATS_UNBIASED_NOTE)
# A training_step that returns nothing (`probe/returned_loss.py`): where it last binds the scalar it names as the loss.
RETURNED_LOSS_NOTE = "the loss to return is bound here"
PLACED = (STEP_NOTE, STALE_USE_NOTE, ALIAS_NOTE, INPUT_NOTE, MODULE_NOTE, REBUILT_NOTE, VIEW_NOTE, MULTI_VIEW_NOTE, RENORM_NOTE,
           REPLACED_NOTE, SETTER_NOTE, LEAF_ROWS_NOTE)


def _placed_at_order(f: ProbeFinding) -> bool:
    return bool(f.notes) and f.notes[0].message in PLACED


def merge(static: Sequence[Diagnostic], result: ProbeResult, display: str) -> list[Diagnostic]:
    """The static findings of one file, merged with the probe's result for that file."""
    show = _Paths(result.path, display)
    target = show.target
    reached = set(result.reached) if result.status != FAILED else set()
    findings = list(result.findings)
    used: set[int] = set()
    confirmed: dict[int, tuple[str, int]] = {}  # a finding also reported at its own line -> the static one it confirmed
    merged: list[Diagnostic] = []
    static_lines = {(os.path.realpath(d.path), d.line) for d in static}
    for d in static:
        # A static finding placed in another module of the project (``engine._placed``) is matched there.
        own = d.path == display
        match = next((i for i, f in enumerate(findings)
                      if ((target, d.line) in {(os.path.realpath(p), line) for p, line in f.lines} if own
                          else (os.path.realpath(d.path), d.line) in {(os.path.realpath(p), line)
                                                                      for p, line in f.lines})
                      and (compatible(d.code, f.code) or own and _same_cut(d, f))), None)
        if match is None and d.related:
            # A static finding placed at the line to change (a stale value used after a step), with the write the
            # probe saw as its first related location.
            first = d.related[0]
            match = next((i for i, f in enumerate(findings) if compatible(d.code, f.code)
                          and (first.path, first.line) in {(show(p), line) for p, line in f.lines}), None)
        if match is not None:
            f = findings[match]
            # The static analysis reports a write inside another file at the call in this one; the probe, which
            # ran that file, also reports it where it is (like a finding it placed at the line to change).
            elsewhere = (show(f.site.path) != d.path if own
                         else os.path.realpath(f.site.path) != os.path.realpath(d.path))
            moved = elsewhere or (_placed_at_order(f)
                                  and (os.path.realpath(f.site.path), f.site.line) not in static_lines)
            if not moved:
                used.add(match)  # a finding placed at the line to change is also reported there, at its own line
            elif not elsewhere:
                confirmed.setdefault(match, (d.code, d.line))
            known = {(r.path, r.line) for r in d.related}
            extra = [r for r in _related(f, show) if (r.path, r.line) not in known and r.line != d.line]
            if f.site.line != d.line or show(f.site.path) != d.path:
                extra.insert(0, Related(show(f.site.path), f.site.line, f.site.column or 1,
                                        "the line to change, as the probe saw it" if moved and not elsewhere
                                        else "the probe saw the write here"))
            merged.append(_probed(
                d, severity=Severity.ERROR,
                message=f"{d.message} [confirmed by the runtime probe on {result.device}: {_confirmation(f)}]",
                related=d.related + tuple(extra), confirmed=True, device=result.device,
                torch_message=f.torch_message))
        elif own and d.line in reached:
            merged.append(_probed(
                d, message=f"{d.message} [not confirmed: the runtime probe ran this line and saw no conflict]",
                confirmed=False, device=result.device))
        else:
            merged.append(d)
    for i, f in enumerate(findings):
        if i not in used:
            merged.append(to_diagnostic(f, result, show, confirmed.get(i)))
    merged.sort(key=lambda d: d.order)
    return merged


def counts(merged: Sequence[Diagnostic], static_count: int) -> dict[str, int]:
    """How the merge went, for the summary line."""
    confirmed = sum(1 for d in merged if isinstance(d, ProbedDiagnostic) and d.confirmed)
    unconfirmed = sum(1 for d in merged if isinstance(d, ProbedDiagnostic) and not d.confirmed)
    added = len(merged) - static_count
    return {"confirmed": confirmed - added, "added": added, "unconfirmed": unconfirmed}
