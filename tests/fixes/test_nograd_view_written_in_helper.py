"""GG105 on a piece of ``chunk``/``unbind`` made under ``torch.no_grad()`` that a helper (a function, a callable
object, a module's ``forward``) then writes in place with grad on: the view is made with grad mode on, outside the
block, and the helper writes its parameter out of place and returns it, each call rebinding the caller's name
(``through_callers_fix``: nothing but the caller holds the piece, as the run saw).  A piece made with grad on
refuses an in-place write, so the view cannot leave the block without the helper's write leaving its place too.
A view of a tied weight (``emb.weight.t()``) that the caller's module still holds is fixed the same way, unsafe (the
module keeps the old values), as it is when the write is in the view's own block, and so is a view a helper returns
from its own no_grad block (``helper_view_with_grad``: the helper returns it outside the block).
Each variant below had no fix before; its fix is now offered and proven by torch."""

from __future__ import annotations

import pytest
from variants import fix_proof

MOVED_AND_REBOUND = [
    "GG105/pos_chunk_qk_scaled::helper_function",
    "GG105/pos_chunk_qk_scaled::callable_class",
    "GG105/pos_chunk_qk_scaled::module_method",
    "GG105/pos_unbind_logvar_clamped::helper_function",
    "GG105/pos_unbind_logvar_clamped::callable_class",
    "GG105/pos_unbind_logvar_clamped::module_method",
    "GG105/pos_transpose_tied_weight_scaled::helper_function",
    "GG105/pos_transpose_tied_weight_scaled::callable_class",
    "GG105/pos_transpose_tied_weight_scaled::module_method",
    "GG105/pos_helper_with_block_returns_transpose::helper_function",
    "GG105/pos_helper_with_block_returns_transpose::callable_class",
    "GG105/pos_helper_with_block_returns_transpose::module_method",
    "GG105/pos_method_decorated_returns_chunk::helper_function",
    "GG105/pos_method_decorated_returns_chunk::callable_class",
    "GG105/pos_method_decorated_returns_chunk::module_method",
]


@pytest.mark.parametrize("key", MOVED_AND_REBOUND)
def test_the_fix_is_offered_and_proven(key):
    fix_proof.assert_proven(key)
