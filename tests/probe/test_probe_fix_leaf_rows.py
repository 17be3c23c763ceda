"""The fix of rows of a leaf iterated into an in-place helper (issue 31 item 3, ``probed_fixes._clone_rows_of_leaf``):
``for row in batch:`` hands each row, one of several views, to a helper that writes it in place, which torch refuses.
Only when the probe saw the rows are of a leaf that requires grad (``LEAF_ROWS_NOTE``: no view of it can be written
with grad mode on, so no write ever reached it) does the loop iterate over clones of the rows.  The positives are
tests/fixtures/probe_only/GG004 (proven by test_probe_fix_proof.py); the loops below must get no such fix."""

from __future__ import annotations

import textwrap
import warnings
from pathlib import Path

import pytest
from programs import load_program

torch = pytest.importorskip("torch")

from gradguard.probe import ProbeOptions
from gradguard.probe.merge import LEAF_ROWS_NOTE, MULTI_VIEW_NOTE, diagnostics
from gradguard.probed_fixes import fixes_for

# The rows are of a layer's output, not a leaf: the helper's writes may be meant to reach that tensor (GG004's own
# fix iterates plain views of it, which autograd lets a write go through), so copies are not offered.
ROWS_OF_AN_OUTPUT = '''
import torch
import torch.nn as nn


def center_(row):
    row.sub_(0.5)


HELPERS = {"center": center_}


def run():
    torch.manual_seed(0)
    enc = nn.Linear(3, 4)
    feats = enc(torch.randn(5, 3))
    helper = HELPERS["center"]
    for row in feats:
        helper(row)
    feats.sum().backward()
'''

# The rows are of a parameter, but the loop iterates `enumerate(...)` of it: not the tensor itself.
ENUMERATED_ROWS_OF_A_PARAMETER = '''
import torch
import torch.nn as nn


def center_(row):
    row.sub_(0.5)


HELPERS = {"center": center_}


def run():
    torch.manual_seed(0)
    enc = nn.Linear(3, 4)
    helper = HELPERS["center"]
    for i, row in enumerate(enc.weight):
        helper(row)
    enc(torch.randn(5, 3)).sum().backward()
'''


@pytest.mark.parametrize("source, line, note", [(ROWS_OF_AN_OUTPUT, 18, MULTI_VIEW_NOTE),
                                                (ENUMERATED_ROWS_OF_A_PARAMETER, 17, LEAF_ROWS_NOTE)],
                         ids=["rows_of_an_output", "enumerated_rows_of_a_parameter"])
def test_rows_not_cloned(source: str, line: int, note: str, worker, tmp_path: Path):
    path = tmp_path / "program.py"
    text = textwrap.dedent(source)
    path.write_text(text, encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="Output 0 of Unbind is a view and is being modified inplace"):
            load_program(path).run()
    result = worker.probe(path, ProbeOptions(entry="run", timeout=60))
    found = [d for d in diagnostics(result, str(path)) if d.path == str(path) and d.code == "GG004"]
    assert [(d.line, d.probe.notes[0].message) for d in found] == [(line, note)], [(d.line, d.message) for d in found]
    fixes = fixes_for(text, str(path), found)
    assert not [f.title for f in fixes.values() if f.title.startswith("Iterate over clones of the rows")]
