"""GG103's ``values.append(v.item())`` whose list another function makes a tensor again: the run tells that the
rebuild reads the very list the numbers were appended to (``GraphBreak.rebuilds_its_list``), whatever each
function calls it (a helper's parameter, its caller's variable, an object's attribute), so the fix appends the
tensors and stacks that list.  Each variant below had no fix before; its fix is now offered and proven by torch."""

from __future__ import annotations

import pytest
from variants import fix_proof

FIXED_ACROSS_FUNCTIONS = [
    "GG103/pos_batch_losses_float_appended_summed_backward::helper_function",  # appended to a helper's parameter
    "GG103/pos_critic_values_item_appended_stacked_in_loss::callable_class",  # by an object's `__call__`
    "GG103/pos_episode_values_item_on_object_rebuilt_in_update::module_method",
    "GG103/pos_rollout_values_read_then_rebuilt_in_loss::closure",
]


@pytest.mark.parametrize("key", FIXED_ACROSS_FUNCTIONS)
def test_the_fix_is_offered_and_proven(key):
    fix_proof.assert_proven(key)
