"""Does a static finding's explanation say what torch does?  The probe is the arbiter.

``compare_file(path, result)`` holds each static mutation finding's ``Explanation`` against the probe
finding at the same line (same line, caller line or origin line, with a compatible code, as ``check
--probe`` merges them) and returns a ``Report``: how many pairs were compared and every ``Disagreement``.
``agreement(path, worker)`` probes the file first (``entry="run"`` by default); the variants harness calls it
on generated programs.

What is compared, each only where both sides make the claim:

- ``family``: loud at the write, loud at backward, or silent;
- ``code``: the rule (GG104 counts as the rule its write is to torch);
- ``save line``: the static saving op's line is one of the lines where the probe saw the written tensor saved;
- ``saving op``: the aten op that saved it there is one that the static op label saves with when torch runs it
  (``torch_names.saving_ops``);
- ``role``: output, input or weight, as the probe saw the saved tensor;
- ``backward line``: the ``backward()`` the static finding says fails (or reads wrong values) is the one the
  probe saw use the tensor;
- ``multi-view``: for GG004, the node torch names (``Split``/``Unbind``, or the further view written through)
  and the function the user called, run in torch (``chunk`` -> ``Split``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from gradguard import parsing
from gradguard.engine import analyze_module
from gradguard.explanation import AT_BACKWARD, AT_WRITE, REACTION, SILENT, Explanation, explain
from gradguard.probe import ProbeFinding, ProbeOptions, ProbeResult
from gradguard.probe.merge import compatible

from torch_names import iteration_node, multi_view_node, saving_ops, tensor_method

_AT_WRITE_CODES = frozenset(code for code, reaction in REACTION.items() if reaction == AT_WRITE)
_MULTI_VIEW_NODES = frozenset({"Split", "SplitWithSizes", "Unbind"})


# (fixture, line, code, aspect) -> why the two sides differ.  Keep it small; every entry is a known defect.  The
# variants of a listed fixture share its entry (at whatever line the transform moved it to).
KNOWN_DISAGREEMENTS: dict[tuple[str, int, str, str], str] = {
    ("GG001/pos_activation_chosen_by_name_output_zeroed", 18, "GG001", "saving op"): (
        "the layer is one of several chosen by a name read at run time: the static message names one alternative "
        "(as an if/else join does), the probe the one that ran; the message should say 'one of'"),
    ("GG101/pos_two_steps_then_second_loss_on_shared_forward", 30, "GG101", "save line"): (
        "two steps rewrite weights this graph saved: the finding names the first step's save (line 20) and folds the "
        "second step in as a related line; torch trips first on the second step's weights (line 22); the message "
        "should name the saves of every folded step"),
}


@dataclass(frozen=True)
class Disagreement:
    """One claim on which the static explanation and the probe differ."""

    path: str
    line: int
    code: str
    aspect: str
    static: object
    probe: object

    @property
    def key(self) -> tuple[str, int, str, str]:
        """(fixture-relative name, line, code, aspect): stable across machines, for expected lists."""
        return (f"{Path(self.path).parent.name}/{Path(self.path).stem}", self.line, self.code, self.aspect)

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.code} {self.aspect}: static {self.static!r}, probe {self.probe!r}"


@dataclass
class Report:
    compared: int = 0  # static findings that had a probe finding to compare with
    disagreements: list[Disagreement] = field(default_factory=list)


def static_explanations(path: Path) -> list[tuple[int, Explanation]]:
    """(reported line, explanation) of every mutation finding the analysis makes in the file."""
    text = path.read_text(encoding="utf-8")
    tree = parsing.parse(text)
    if isinstance(tree, parsing.SyntaxProblem):
        return []
    findings = analyze_module(tree, str(path), parsing.source_lines(text), use_jedi=False)
    found = []
    for finding in findings:
        explanation = explain(finding)
        if explanation is not None:
            found.append((finding.node.lineno, explanation))
    return sorted(found, key=lambda pair: (pair[0], pair[1].code))


def probe_family(f: ProbeFinding) -> str | None:
    if f.kind == "silent" or f.code == "GG102":
        return SILENT
    if f.kind in ("raised", "pending"):
        return AT_WRITE if f.code in _AT_WRITE_CODES else AT_BACKWARD
    return None


def compare(path: Path, line: int, e: Explanation, f: ProbeFinding) -> list[Disagreement]:
    """Every claim of ``e`` that the probe finding ``f`` contradicts."""
    out: list[Disagreement] = []

    def differ(aspect: str, static: object, probe: object) -> None:
        out.append(Disagreement(str(path), line, e.code, aspect, static, probe))

    if e.kind != probe_family(f):
        differ("family", e.kind, f"{f.kind} {f.code}")
        return out
    static_code = e.code if e.code != "GG104" else None
    if static_code is not None and static_code != f.code:
        differ("code", e.code, f.code)
    if e.kind in (AT_BACKWARD, SILENT) and f.saves:
        _compare_save(e, f, differ)
        if e.backward_line is not None and f.backward is not None and f.backward.line != e.backward_line:
            differ("backward line", e.backward_line, f.backward.line)
    if e.code == "GG004" or f.view_node is not None:
        _compare_multi_view(e, f, differ)
    return out


def _compare_save(e: Explanation, f: ProbeFinding, differ) -> None:
    here = [s for s in f.saves if s.site is not None and s.site.line == e.save_line]
    if not here:
        differ("save line", e.save_line, sorted({s.site.line for s in f.saves if s.site}))
        return
    if e.saving_op and e.saving_op.endswith(".apply"):
        # A custom Function's `ctx.save_for_backward` (the static label is `Foo.apply`): no torch op to run; the
        # save line and role say which save it is.
        if all(s.role != e.save_role for s in here) and e.save_role != "output":
            differ("role", e.save_role, sorted({s.role for s in here}))
        return
    ops = saving_ops(e.saving_op) if e.saving_op else None
    if ops is None:
        differ("saving op", e.saving_op, "torch cannot run this label")
        return
    same_op = [s for s in here if s.op in ops]
    if not same_op:
        differ("saving op", f"{e.saving_op} ({', '.join(sorted(ops))})", sorted({s.op for s in here}))
        return
    if all(s.role != e.save_role for s in same_op):
        differ("role", e.save_role, sorted({s.role for s in same_op}))


def _compare_multi_view(e: Explanation, f: ProbeFinding, differ) -> None:
    if e.multi_view is None or f.view_node is None:
        differ("multi-view", e.multi_view, f.view_node)
        return
    if e.through_view:
        if f.view_node in _MULTI_VIEW_NODES:
            differ("multi-view", f"a view of a {e.multi_view} output", f.view_node)
    elif e.multi_view != f.view_node:
        differ("multi-view", e.multi_view, f.view_node)
    if e.custom_view:
        return  # a view made inside a custom Function (or a full backward hook's): no view function to call
    if e.view_call and not tensor_method(e.view_call):
        return  # the user's name for a wrapper (`split_op = lambda t, *a: torch.split(t, *a)`): nothing to call by
        # that name; the node the analysis found behind it is compared with the probe's above
    called = multi_view_node(e.view_call) if e.view_call else iteration_node()
    if called != e.multi_view:
        differ("multi-view function", f"{e.view_call or 'unpacking'} -> {called}", e.multi_view)


def _matches(path: Path, line: int, e: Explanation, f: ProbeFinding) -> bool:
    target = os.path.realpath(path)
    return compatible(e.code, f.code) and (target, line) in {(os.path.realpath(p), n) for p, n in f.lines}


def compare_file(path: Path, result: ProbeResult) -> Report:
    """Compare every static mutation finding of ``path`` that the probe also reported.  When several probe
    findings match one line (two ops of one statement), the one that agrees best is taken."""
    report = Report()
    for line, e in static_explanations(path):
        candidates = [f for f in result.findings if _matches(path, line, e, f)]
        if not candidates:
            continue
        report.compared += 1
        report.disagreements += min((compare(path, line, e, f) for f in candidates), key=len)
    return report


def agreement(path: Path, worker, entry: str | None = "run", timeout: float = 60) -> list[Disagreement]:
    """Probe ``path`` with ``worker`` (a started ``ProbeWorker``) and compare; the variants harness's entry."""
    result = worker.probe(Path(path), ProbeOptions(entry=entry, timeout=timeout))
    return compare_file(Path(path), result).disagreements
