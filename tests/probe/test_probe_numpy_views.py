"""Issue 14, signal (b): writes through NumPy arrays that share a graph tensor's memory (``.numpy()``,
``torch.from_numpy``), which no dispatcher and no version counter sees.  The probe names the line that
wrote the array.  Each program is first run with torch: its gradients differ from the reference's
(positives) or equal them (negatives)."""

from __future__ import annotations

import runpy

import pytest

torch = pytest.importorskip("torch")

PROGRAM = """\
import numpy as np
import torch
import torch.nn as nn


def clip(arr):
    arr[arr < 0] = 0.0


def run():
    torch.manual_seed(0)
    enc, head = nn.Linear(4, 6), nn.Linear(6, 1)
    batch = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    x = torch.from_numpy(batch)
    h = enc(x)
    arr = h.detach().numpy()
    {write}
    loss = head(h).pow(2).sum()
    {late}
    loss.backward()
    {after}
    return [enc.weight.grad, head.weight.grad]
"""
WRITE, LATE = 17, 19
# name -> (the write before the forward reads h, a write after it, a write after backward(), the line named)
POSITIVES = {
    "view_written_then_read": ("arr *= 2.0", "pass", "pass", WRITE),
    "view_written_in_a_helper": ("clip(arr)", "pass", "pass", 7),
    "from_numpy_saved_then_written": ("pass", "batch -= batch.mean(axis=0)", "pass", LATE),
}
NEGATIVES = {
    "written_after_backward": ("pass", "pass", "arr *= 2.0; batch[:] = 0.0"),
    "copy_written": ("arr = arr.copy(); arr *= 2.0", "pass", "pass"),
    "labels_view_written": ("labels = torch.zeros(5).numpy(); labels += 1.0", "pass", "pass"),
}


def _program(script, name, write, late, after):
    return script(PROGRAM.format(write=write, late=late, after=after), name=f"{name}.py")


def _same(a, b):
    return all(torch.allclose(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("name", POSITIVES)
def test_numpy_write_the_graph_uses_is_reported(name, script, probe):
    write, late, after, line = POSITIVES[name]
    path = _program(script, name, write, late, after)
    got = runpy.run_path(str(path))["run"]()
    want = runpy.run_path(str(_program(script, f"{name}_clean", "pass", "pass", "pass")))["run"]()
    assert not _same(got, want), "torch: the gradients differ from the unwritten program's"
    result = probe(path, entry="run")
    assert result.status == "completed", result.detail
    [finding] = result.findings
    assert (finding.code, finding.kind, finding.site.line) == ("GG102", "silent", line)
    assert "NumPy array that shares its memory" in finding.message
    assert not result.sandbox.get("tracer_errors")


@pytest.mark.parametrize("name", NEGATIVES)
def test_numpy_write_the_graph_does_not_use_is_not_reported(name, script, probe):
    path = _program(script, name, *NEGATIVES[name])
    got = runpy.run_path(str(path))["run"]()
    want = runpy.run_path(str(_program(script, f"{name}_clean", "pass", "pass", "pass")))["run"]()
    assert _same(got, want), "torch: the gradients are the unwritten program's"
    result = probe(path, entry="run")
    assert result.status == "completed", result.detail
    assert result.findings == [], [f.message for f in result.findings]


TRACED = """\
import sys

import numpy as np
import torch
import torch.nn as nn


def run():
    model = nn.Linear(4, 2)
    batch = np.ones((3, 4), dtype=np.float32)
    print("before the forward:", sys.gettrace() is not None)
    loss = model(torch.from_numpy(batch)).sum()
    print("saved by a live graph:", sys.gettrace() is not None)
    loss.backward()
    print("after backward:", sys.gettrace() is not None)
"""


def test_line_tracer_runs_only_while_a_watched_storage_matters(script, probe):
    """The line tracer slows every Python call: it runs from the save of a NumPy batch to the backward."""
    result = probe(script(TRACED), entry="run")
    assert result.status == "completed", result.detail
    assert result.stdout.split("\n")[:3] == ["before the forward: False", "saved by a live graph: True",
                                             "after backward: False"], result.stdout
    assert result.findings == []
