"""GG108's clone of what a hook is given, where the run shows which parameter brought the written memory in
(``HookWrite.entered``, ``Moment.callers_pass``): a forward hook's output (the module it is handed also holds the
parameter the output is a view of, so the output is its last parameter) and a backward pre-hook's ``grad_output``
tuple (cloned item by item) are cloned on the hook's entry, wherever the write is (a closure, an alias, a
container's item).  Each variant below had no fix before; its fix is now offered and proven by torch."""

from __future__ import annotations

import pytest
from variants import fix_proof

CLONED_ON_ENTRY = [
    "GG108/pos_forward_hook_zeroes_slice_of_query_table::closure",
    "GG108/pos_forward_hook_zeroes_slice_of_query_table::alias_chain",
    "GG108/pos_backward_pre_hook_scales_grad_output::closure",
    "GG108/pos_backward_pre_hook_scales_grad_output::container_list",
]


@pytest.mark.parametrize("key", CLONED_ON_ENTRY)
def test_the_clone_on_entry_is_offered_and_proven(key):
    fix_proof.assert_proven(key)
