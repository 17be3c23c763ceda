"""GG004 on a piece of a split/unbind that a helper (a function, a method, a callable object) writes in place: the
helper writes its parameter out of place and returns it, and each call rebinds the caller's name (as GG001's fix of
a saved tensor a helper writes), when the run saw nothing but the caller's name hold the piece.  A closure that
writes a piece of its enclosing function (a free variable) rebinds it there, declared ``nonlocal``, when each call
of the closure is a statement after which nothing else holds the piece.  Each variant below had no fix before; its
fix is now offered and proven by torch (one per kind of helper, several fixture shapes)."""

from __future__ import annotations

import pytest
from variants import fix_proof

REBOUND_BY_CALLERS = [
    "GG004/pos_unbind_add_minimal::helper_function",
    "GG004/pos_vae_logvar_clamp::callable_class",
    "GG004/pos_glu_gate_sigmoid_inplace::module_method",
    "GG004/pos_box_coords_unbind_clamp::helper_function",
    "GG004/pos_custom_function_identity_alias::module_method",
    "GG004/pos_split_output_column_assign::helper_function",  # a write through a view of the piece: a copy first
    "GG004/pos_unpack_then_index_assign::module_method",
    "GG004/pos_unbind_add_minimal::closure",
    "GG004/pos_split_output_column_assign::closure",
    "GG004/pos_unbind_time_steps_of_leaf::closure",
]


@pytest.mark.parametrize("key", REBOUND_BY_CALLERS)
def test_the_fix_is_offered_and_proven(key):
    fix_proof.assert_proven(key)
