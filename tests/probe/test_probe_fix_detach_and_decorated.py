"""Two probe-only fixes built from syntax the probe's facts point at (``gradguard.probed_fixes.EDITS``):

- torch refused ``x.detach_()`` on a view ("Can't detach views in-place"): ``x = x.detach()``, where the syntax shows
  no other name or container can hold the tensor at the detach (``_detach_view_out_of_place``);
- a loss term computed by a call of a ``@torch.no_grad()`` function on values that require grad: the call made to
  the undecorated function, ``helper.__wrapped__(...)`` (``_grad_on_for_decorated_call``).

Each program is probed (``--entry run``); a positive's fix is applied and torch proves it (``run()`` of the fixed copy
runs clean and gives ``reference()``'s gradients); a negative's finding is real but gets no fix (the edit would be
wrong there, or nothing the syntax shows says it is right)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from programs import assert_fix_proven

torch = pytest.importorskip("torch")

from gradguard.probe import ProbeOptions
from gradguard.probe.merge import diagnostics
from gradguard.probed_fixes import fixes_for

# A method's loop binds a transposed view each iteration, detaches it in place, then keeps it in a list: the list
# holds the tensors of earlier iterations, each rebound before its detach.
VIEW_DETACHED_IN_LOOP_OF_METHOD = '''
import torch
import torch.nn as nn


class Tracker:
    def __init__(self):
        self.net = nn.Linear(4, 6)

    def targets(self, xs, in_place):
        out = []
        for x in xs:
            t = self.net(x).view(3, 2).t()
            if in_place:
                t.detach_()
            else:
                t = t.detach()
            out.append(t)
        return out


def _grads(in_place):
    torch.manual_seed(0)
    tracker = Tracker()
    w = torch.randn(3, 3, requires_grad=True)
    loss = sum((t @ w).pow(2).sum() for t in tracker.targets(torch.randn(2, 4), in_place))
    loss.backward()
    return [w.grad]


def run():
    return _grads(True)


def reference():
    return _grads(False)
'''

# A helper permutes its argument's values into a local view, asks its shape and scales it before the detach.
PERMUTED_VIEW_IN_HELPER = '''
import torch
import torch.nn as nn


def frozen_axes(feats, in_place):
    axes = feats.permute(1, 0)
    scale = axes.shape[0] * 2.0
    if in_place:
        axes.detach_()
    else:
        axes = axes.detach()
    return axes / scale


def _grads(in_place):
    torch.manual_seed(0)
    net = nn.Linear(3, 5)
    w = torch.randn(4, 2, requires_grad=True)
    (frozen_axes(net(torch.randn(4, 3)), in_place) @ w).sum().backward()
    return [w.grad]


def run():
    return _grads(True)


def reference():
    return _grads(False)
'''

# The view is put in a list before it is detached, and the list is read after: rebinding the name would leave the
# list's tensor attached.
VIEW_KEPT_IN_LIST_BEFORE_DETACH = '''
import torch
import torch.nn as nn


def run():
    torch.manual_seed(0)
    net = nn.Linear(4, 6)
    kept = []
    z = net(torch.randn(2, 4)).transpose(0, 1)
    kept.append(z)
    z.detach_()
    w = torch.randn(2, 2, requires_grad=True)
    (kept[0] @ w).sum().backward()
    return [w.grad]
'''

# The view is a helper's return value, which the helper may also keep (it does: a cache).
VIEW_RETURNED_BY_HELPER = '''
import torch
import torch.nn as nn

CACHE = []


def rows(t):
    view = t.reshape(3, 4)
    CACHE.append(view)
    return view


def run():
    torch.manual_seed(0)
    net = nn.Linear(2, 12)
    z = rows(net(torch.randn(1, 2)))
    z.detach_()
    w = torch.randn(4, 2, requires_grad=True)
    (z @ w).sum().backward()
    return [w.grad]
'''

# The view is a module's variable, detached in place by a function: rebinding the name there would make it local.
MODULE_VIEW_DETACHED_IN_FUNCTION = '''
import torch
import torch.nn as nn

torch.manual_seed(0)
NET = nn.Linear(2, 6)
TABLE = NET(torch.randn(1, 2)).reshape(3, 2)


def freeze_table():
    TABLE.detach_()


def run():
    freeze_table()
    w = torch.randn(2, 2, requires_grad=True)
    (TABLE @ w).sum().backward()
    return [w.grad]
'''

# A method's loop adds a consistency term computed by a decorated helper of two arguments.
DECORATED_TERM_IN_LOOP_OF_METHOD = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


@torch.no_grad()
def consistency(student, teacher):
    return F.mse_loss(student.softmax(-1), teacher.softmax(-1))


def consistency_trained(student, teacher):
    return F.mse_loss(student.softmax(-1), teacher.softmax(-1))


class Learner:
    def __init__(self):
        torch.manual_seed(0)
        self.student = nn.Linear(4, 3)
        self.teacher = nn.Linear(4, 3)

    def loss(self, batches, fixed):
        total = 0.0
        for x in batches:
            out = self.student(x)
            term = consistency_trained(out, self.teacher(x)) if fixed else consistency(out, self.teacher(x))
            total = total + out.pow(2).mean() + 0.5 * term
        return total


def _grads(fixed):
    learner = Learner()
    learner.loss(torch.randn(2, 5, 4), fixed).backward()
    return [p.grad for p in learner.student.parameters()] + [p.grad for p in learner.teacher.parameters()]


def run():
    return _grads(False)


def reference():
    return _grads(True)
'''

# The decorated helper writes in place: with grad mode on, autograd may refuse what it does.
DECORATED_TERM_WRITES_IN_PLACE = '''
import torch
import torch.nn as nn


@torch.no_grad()
def spread(pred):
    centred = pred - pred.mean(0)
    centred.clamp_(-1, 1)
    return centred.pow(2).mean()


def run():
    torch.manual_seed(0)
    model = nn.Linear(3, 4)
    pred = model(torch.randn(6, 3))
    loss = pred.pow(2).mean() + 0.1 * spread(pred)
    loss.backward()
    return [p.grad for p in model.parameters()]
'''

# The name the call goes through is bound again after the decorated def: which function runs is not the def's.
DECORATED_NAME_BOUND_AGAIN = '''
import torch
import torch.nn as nn


@torch.no_grad()
def score(pred):
    return pred.pow(2).mean()


def _plain(pred):
    return pred.abs().mean()


score_eval = score
score = torch.no_grad()(_plain)


def run():
    torch.manual_seed(0)
    model = nn.Linear(3, 4)
    pred = model(torch.randn(6, 3))
    loss = pred.pow(2).mean() + 0.1 * score(pred)
    loss.backward()
    return [p.grad for p in model.parameters()]
'''


def _found(source: str, worker, tmp_path: Path):
    path = tmp_path / "program.py"
    text = textwrap.dedent(source)
    path.write_text(text, encoding="utf-8")
    result = worker.probe(path, ProbeOptions(entry="run", timeout=60))
    found = [d for d in diagnostics(result, str(path)) if d.path == str(path) and d.code == "GG103"]
    assert found, [(d.code, d.line, d.message) for d in diagnostics(result, str(path))]
    return path, text, found


@pytest.mark.parametrize("source", [VIEW_DETACHED_IN_LOOP_OF_METHOD, PERMUTED_VIEW_IN_HELPER,
                                    DECORATED_TERM_IN_LOOP_OF_METHOD],
                         ids=["view_detached_in_loop_of_method", "permuted_view_in_helper",
                              "decorated_term_in_loop_of_method"])
def test_probe_only_fix_is_proven(source: str, worker, tmp_path: Path):
    path, text, found = _found(source, worker, tmp_path)
    fixes = fixes_for(text, str(path), found)
    assert len(fixes) == len(found), [(d.line, d.message) for d in found]
    assert_fix_proven(text, path, [e for fix in fixes.values() for e in fix.edits], tmp_path / "fixed.py")


@pytest.mark.parametrize("source", [VIEW_KEPT_IN_LIST_BEFORE_DETACH, VIEW_RETURNED_BY_HELPER,
                                    MODULE_VIEW_DETACHED_IN_FUNCTION, DECORATED_TERM_WRITES_IN_PLACE,
                                    DECORATED_NAME_BOUND_AGAIN],
                         ids=["view_kept_in_list_before_detach", "view_returned_by_helper",
                              "module_view_detached_in_function",
                              "decorated_term_writes_in_place", "decorated_name_bound_again"])
def test_probe_only_fix_is_refused(source: str, worker, tmp_path: Path):
    path, text, found = _found(source, worker, tmp_path)
    assert not fixes_for(text, str(path), found)
