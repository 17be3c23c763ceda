"""The guards of ``gradguard.probed_fixes`` (the bridge from a probe-only finding to its rule's fix builder), on
probe findings written out by hand: where a shape's fix would be wrong, none is offered.  torch proves the fixes
themselves in tests/probe/test_probe_fix_proof.py and bench/probe_fixes.py."""

from __future__ import annotations

import textwrap

from gradguard.diagnostics import Severity, Span
from gradguard.probe.merge import ProbedDiagnostic
from gradguard.probe.model import Note, ProbeFinding, Saving, Site
from gradguard.probed_fixes import fixes_for

PATH = "train.py"


def _fix(source: str, finding: ProbeFinding):
    text = textwrap.dedent(source)
    diag = ProbedDiagnostic(PATH, Span(finding.site.line, 1, finding.site.line, 1), finding.code, Severity.ERROR,
                            "m", probe=finding)
    return fixes_for(text, PATH, [diag]).get(id(diag))


def _line(source: str, marker: str) -> int:
    return next(i for i, line in enumerate(textwrap.dedent(source).splitlines(), 1) if marker in line)


WRITE = """\
import torch

def step(lin, x):
    y = torch.sigmoid(lin(x))
    y[:, 0] = 0.0  # write
    y.sum().backward()
"""


def _write_finding(source: str) -> ProbeFinding:
    col = textwrap.dedent(source).splitlines()[3].index("torch.sigmoid") + 1
    return ProbeFinding("GG001", "raised", Site(PATH, _line(source, "# write"), 5), "m",
                        saves=(Saving(Site(PATH, 4, col), "sigmoid", "output"),),
                        backward=Site(PATH, _line(source, "backward()"), 5))


def test_a_write_to_a_saved_tensor_gets_the_rules_fix():
    fix = _fix(WRITE, _write_finding(WRITE))
    assert fix is not None and ("clone" in fix.title or "out of place" in fix.title), fix


def test_no_fix_for_a_write_under_no_grad():
    source = WRITE.replace("    y[:, 0] = 0.0  # write", "    with torch.no_grad():\n        y[:, 0] = 0.0  # write")
    assert _fix(source, _write_finding(source)) is None


CUT = """\
def features(encoder, x):
    h = encoder(x)
    return h.data  # cut
"""


def test_a_lone_cut_is_let_through():
    finding = ProbeFinding("GG103", "starved", Site(PATH, 3, 12), "m")
    fix = _fix(CUT, finding)
    assert fix is not None and fix.title.startswith("Let the gradient through")


def test_no_fix_for_a_cut_among_others_in_its_function():
    source = CUT.replace("    return h.data  # cut", "    h = h.data  # cut\n    return h.detach()")
    assert _fix(source, ProbeFinding("GG103", "starved", Site(PATH, 3, 9), "m")) is None


STATE = """\
import torch

class Bank(torch.nn.Module):
    def push(self, k):
        self.bank[:, :2] = k.T  # write

    def forward(self, q, k):
        s = q @ self.bank  # op
        self.push(k)  # call
        return s
"""


def _state_finding(source: str) -> ProbeFinding:
    op = _line(source, "# op")
    text = textwrap.dedent(source).splitlines()[op - 1]
    col = text.index("= ") + 3  # the op's expression, after `s = `
    return ProbeFinding("GG001", "raised", Site(PATH, _line(source, "# call"), 9), "m",
                        notes=(Note(Site(PATH, _line(source, "# write"), 9),
                                    "the method stores the value in place into its object's tensor here"),),
                        saves=(Saving(Site(PATH, op, col), "mm", "input"),))


def test_a_state_read_by_an_op_is_copied_there():
    fix = _fix(STATE, _state_finding(STATE))
    assert fix is not None and fix.title == "Read a copy of the state: `self.bank.clone()`"


def test_no_fix_when_the_op_reads_the_state_twice():
    source = STATE.replace("s = q @ self.bank  # op", "s = (q @ self.bank) @ self.bank.t()  # op")
    assert _fix(source, _state_finding(source)) is None
