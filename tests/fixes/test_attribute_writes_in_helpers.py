"""A write to an attribute chain (``model.emb.weight[pad] = 0``) inside a helper, closure or callable object rebinds
no name a caller could rebind: it is fixed there only by a fix that sees to every caller (a parameter's reset under
``torch.no_grad()`` keeps the write for all of them).  A helper's write is a computation or an update as the run
that reached it went (``Moment.call_sites``: a helper that ``forward`` calls computes).  Each variant below had no
fix before; its fix is now offered and proven by torch."""

from __future__ import annotations

import pytest
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
