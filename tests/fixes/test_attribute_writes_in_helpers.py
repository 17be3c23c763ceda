"""A write to an attribute chain (``model.emb.weight[pad] = 0``) inside a helper, closure or callable object rebinds
no name a caller could rebind: it is fixed there only by a fix that sees to every caller (a parameter's reset under
``torch.no_grad()`` keeps the write for all of them).  A helper's write is a computation or an update as the run
that reached it went (``Moment.call_sites``: a helper that ``forward`` calls computes).  Each variant below had no
fix before; its fix is now offered and proven by torch."""

from __future__ import annotations

import pytest
from programs import found
from variants import fix_proof

FIXED_IN_HELPERS = [
    "GG003/pos_embedding_pad_row_in_loop::helper_function",
    "GG003/pos_embedding_pad_row_in_loop::closure",
    "GG003/pos_embedding_pad_row_in_loop::callable_class",
    "GG104/pos_param_elementwise_clip_loop::module_method",
    "GG104/pos_param_elementwise_clip_loop::closure",
]


@pytest.mark.parametrize("key", FIXED_IN_HELPERS)
def test_the_fix_is_offered_and_proven(key):
    fix_proof.assert_proven(key)


# A helper computes with a parameter's leaf (``self.weight[0] = 0`` in a helper its forward calls): it writes a
# copy and returns it, and the caller reads the copy where the run saw it take the leaf's values
# (``Moment.values_taken_after``), when each of those names the leaf.
COPIED_FOR_CALLERS = [
    "GG003/pos_param_row_in_forward::helper_function",
    "GG003/pos_param_row_in_forward::callable_class",
    "GG003/pos_diagonal_zero_in_forward::helper_function",
    "GG003/pos_diagonal_zero_in_forward::callable_class",
    "GG002/pos_clamp_weight_in_forward::helper_function",  # `self.weight.clamp_(...)`: `weight = self.weight.clamp(...)`
    "GG002/pos_param_decay_in_forward::callable_class",
]


@pytest.mark.parametrize("key", COPIED_FOR_CALLERS)
def test_a_helpers_copy_of_a_parameters_leaf_is_read_by_its_callers(key):
    fix_proof.assert_proven(key)


HELPER_THEN = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


def pin(m):
    m.fc.weight[0] = 0


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        pin(self)
        return {read}
"""


@pytest.mark.parametrize("read, copied", [
    ("F.linear(x, self.fc.weight, self.fc.bias)", True),
    ("self.fc(x)", False),  # the layer takes its own weight: a copy cannot reach it
    ("F.linear(x, self.fc.weight, self.fc.bias) + self.fc(x)", False),
])
def test_the_copy_is_offered_only_where_every_read_names_the_leaf(read, copied):
    src = HELPER_THEN.format(read=read) + "\n\nBlock()(torch.randn(2, 4)).sum().backward()\n"
    (finding,) = found("GG003", src)
    titles = [finding.fix.title] if finding.fix is not None else []
    assert any("returns it, read as `weight`" in t for t in titles) is copied, titles
