"""GG103's optimizer built before the statement that replaces modules it holds, by a helper: the call of the helper
moves after the replacement when the run saw the construction in the frame that call entered (``made_in``) and
the helper only returns it, built from its own parameters.  Each variant below had no fix before; its fix is now
offered and proven by torch.  A helper that does more, or reads a variable of another scope, keeps its call where
it is."""

from __future__ import annotations

import pytest
from programs import found
from variants import fix_proof

BUILT_BY_A_HELPER = [
    "GG103/pos_pruner_class_replaces_convs_after_optimizer::helper_function",
    "GG103/pos_setattr_over_named_children_after_optimizer::callable_class",  # an object's `__call__`
    "GG103/pos_optimizer_made_before_helper_swaps_layers::module_method",  # a module's `forward`
]


@pytest.mark.parametrize("key", BUILT_BY_A_HELPER)
def test_the_fix_is_offered_and_proven(key):
    fix_proof.assert_proven(key)


def test_a_helper_reading_its_enclosing_variables_keeps_its_call():
    assert fix_proof.prove_variant("GG103/pos_pruner_class_replaces_convs_after_optimizer::closure")["status"] \
        == fix_proof.NO_FIX


_PROGRAM = """
import torch
import torch.nn as nn

LOG = []


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(3, 4)
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        return self.head(torch.tanh(self.body(x)))


def swap_head(model):
    model.head = nn.Linear(4, 1, bias=False)


def make(model):
{body}


def train():
    torch.manual_seed(0)
    model = Net()
    opt = make(model)
    swap_head(model)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(5, 3)).pow(2).mean().backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]
"""


@pytest.mark.parametrize("body, fixed", [
    ("    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    return opt", True),
    ("    LOG.append(len(LOG))\n    return torch.optim.SGD(model.parameters(), lr=0.1)", False),  # does more
    ("    return torch.optim.SGD(model.parameters(), lr=0.1 * len(LOG))", False),  # reads a module's variable
])
def test_only_a_helper_that_only_builds_it_moves(body, fixed):
    (diag,) = found("GG103", _PROGRAM.replace("{body}", body))
    assert (diag.fix is not None and diag.fix.title.startswith("Build `opt` after the replacement")) is fixed


# The construction run by a compound statement of the block (`if`, `try`, a loop, `with`): reported there, and the
# statement around it, run for it alone, moves whole when its control calls nothing but value code.
BUILT_IN_A_BLOCK = [
    "GG103/pos_setattr_over_named_children_after_optimizer::wrap_try",
    "GG103/pos_pruner_class_replaces_convs_after_optimizer::wrap_loop_once",
    "GG103/pos_optimizer_made_before_helper_swaps_layers::wrap_if_true",
]


@pytest.mark.parametrize("key", BUILT_IN_A_BLOCK)
def test_the_block_around_the_construction_moves(key):
    fix_proof.assert_proven(key)


@pytest.mark.parametrize("wrapped, reported", [
    ("    if TRAIN:\n        opt = torch.optim.SGD(model.parameters(), lr=0.1)\n", "opt = torch.optim.SGD("),
    ("    for _ in range(1):\n        opt = torch.optim.SGD(model.parameters(), lr=0.1)\n", "opt = torch.optim.SGD("),
    ("    with torch.enable_grad():\n        opt = torch.optim.SGD(model.parameters(), lr=0.1)\n        LOG.append(1)\n",
     "opt = torch.optim.SGD("),
    # the optimizer held may be the one built before: the call that replaces the head stays the line
    ("    if opt is None:\n        opt = torch.optim.SGD(model.parameters(), lr=0.1)\n", "swap_head(model)"),
    ("    if TRAIN:\n        opt = torch.optim.SGD(model.parameters(), lr=0.1)\n        LOG.append(opt)\n",
     "swap_head(model)"),
])
def test_a_construction_in_a_block_is_the_line_when_only_it_names_the_optimizer(wrapped, reported):
    program = _PROGRAM.replace("{body}", "    return None").replace("LOG = []", "LOG = []\nTRAIN = True").replace(
        "    opt = make(model)\n", "    opt = make(model)\n" + wrapped)
    (diag,) = found("GG103", program)
    assert program.splitlines()[diag.line - 1].strip().startswith(reported)
