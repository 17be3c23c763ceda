"""Batch norm with training=False handed its input's own statistics computed without a graph (issue 31 item 3,
``probed_fixes._attached_batch_statistics``): the probe saw the running statistics equal the input's per-channel mean
and variance and names the variance's kind (biased or unbiased) in its note; the fix computes them again from the
input, attached.  The positives are tests/fixtures/probe_only/GG103/pos_batch_norm_eval_* (proven by
test_probe_fix_proof.py); the calls below must get no such fix: the input is read three times by the fix, and
statistics given by a call would be dropped with whatever else that call does."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from gradients import grads_equal
from programs import load_program

torch = pytest.importorskip("torch")

from gradguard.probe import ProbeOptions
from gradguard.probe.merge import OWN_STATS_UNBIASED_NOTE, diagnostics
from gradguard.probed_fixes import fixes_for

PROGRAM = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


def stats(x):
    with torch.no_grad():
        return x.mean(dim=(0, 2)), x.var(dim=(0, 2))


def grads(fused):
    torch.manual_seed(0)
    conv = nn.Conv1d(2, 3, 3, padding=1)
    x = torch.randn(4, 2, 6)
    a = conv(x)
    if fused:
        {call}
    else:
        b = (a - a.mean(dim=(0, 2), keepdim=True)) / torch.sqrt(a.var(dim=(0, 2), keepdim=True) + 1e-5)
    b.pow(2).sum().backward()
    return [p.grad for p in conv.parameters()]


def run():
    return grads(True)


def reference():
    return grads(False)
'''
REFUSED = {
    # the statistics are a call's results: dropping it could drop more than their computation
    "statistics_from_a_call": "b = F.batch_norm(a, stats(a)[0], stats(a)[1], training=False)",
    # the input is a call: the fix reads it three times
    "input_a_call": "mean, var = stats(conv(x)); b = F.batch_norm(conv(x), mean, var, training=False)",
}


@pytest.mark.parametrize("name", REFUSED)
def test_statistics_not_computed_again(name: str, worker, tmp_path: Path):
    path = tmp_path / f"{name}.py"
    text = textwrap.dedent(PROGRAM.replace("{call}", REFUSED[name]))
    path.write_text(text, encoding="utf-8")
    program = load_program(path)
    assert not grads_equal(program.run(), program.reference()), "torch: the statistics' gradient is lost"
    result = worker.probe(path, ProbeOptions(entry="run", timeout=60))
    found = [d for d in diagnostics(result, str(path)) if d.path == str(path) and d.code == "GG103"]
    assert [(d.line, [n.message for n in d.probe.notes]) for d in found] == [(18, [OWN_STATS_UNBIASED_NOTE])], \
        [(d.line, d.message) for d in found]
    assert not [f.title for f in fixes_for(text, str(path), found).values() if f.title.startswith("Normalise")]
