"""GG101's fixes edit the function that makes the call when the statement they move or unguard is a followed call:
a step run by a helper, closure, method or instance whose body is only that step moves as that call (past the later
backward, or below the second backward of one loss); a kept value stored by such a function, called under the
caller's ``if <it> is None:`` (after the ``def`` or the instance that makes it), loses that guard there; a mixed
value computed by such a call moves above the update with what makes its callee.  Each variant below had no fix
before; its fix is now offered and proven by torch (one or two per fix form and per kind of callee)."""

from __future__ import annotations

import pytest
from variants import fix_proof

FIXED_IN_CALLERS = [
    "GG101/pos_value_step_before_policy_loss_in_loop::module_method",
    "GG101/pos_critic_step_before_guarded_generator_backward::helper_function",
    "GG101/pos_agent_lambda_returns_detached_for_critic_step::closure",
    "GG101/pos_same_loss_backward_twice_step_between::helper_function",
    "GG101/pos_cache_filled_lazily_on_holder_object::callable_class",
    "GG101/pos_prototypes_cached_on_module_with_graph::closure",
    "GG101/pos_td_error_after_critic_step_detached::closure",
    "GG101/pos_agent_advantage_annotated_after_value_step::module_method",
]


@pytest.mark.parametrize("key", FIXED_IN_CALLERS)
def test_the_fix_is_offered_and_proven(key):
    fix_proof.assert_proven(key)
