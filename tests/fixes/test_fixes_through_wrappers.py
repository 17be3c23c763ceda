"""GG101's, GG102's and GG103's fixes find their statements through the control around them: a step, a backward, a
forward, a kept value or a hidden write alone inside ``if True:``, ``with torch.enable_grad():``, a one-pass loop or ``try:`` is moved (or copied,
or kept) with that control, as the same statement without it is, and a module replaced there has the optimizer built before it built after the control.  Each variant below had no fix before; its fix
is now offered and proven by torch (one per fix form: clear before the backward, compute the mixed value before
the update, the forward after the step, the step after the later backward, backpropagate once, compute the kept
value anew; a write hidden under no_grad put in the graph)."""

from __future__ import annotations

import ast

import pytest
from gradguard import statements
from variants import fix_proof

FIXED_THROUGH_WRAPPERS = [
    "GG101/pos_stale_grads_one_of_two_models_cleared::wrap_if_true",
    "GG101/pos_td_error_after_critic_step_detached::wrap_try",
    "GG101/pos_gan_helper_train_discriminator::wrap_enable_grad",
    "GG101/pos_value_step_before_policy_loss_in_loop::wrap_loop_once",
    "GG101/pos_same_loss_backward_twice_step_between::wrap_if_true",
    "GG101/pos_prototypes_cached_on_module_with_graph::wrap_try",
    # GG102's write put in the graph keeps the control it sat in, out of the no_grad block
    "GG102/pos_nograd_gate_scale_hidden::wrap_if_true",
    "GG102/pos_inference_mode_clip_logits::wrap_loop_once",
    "GG102/pos_nograd_zero_padding_hidden::wrap_try",
    # GG103's optimizer built just before the loop or `if` that replaces a module it holds is built after it
    "GG103/pos_head_replaced_after_optimizer::wrap_loop_once",
    "GG103/pos_head_replaced_after_optimizer::wrap_if_true",
    # GG103's NumPy round trip bound inside the control and rebuilt after it is computed in torch at its binding
    "GG103/pos_numpy_aux_term_roundtrip::wrap_try",
    "GG103/pos_numpy_slice_statistic_rebuilt::wrap_enable_grad",
]


@pytest.mark.parametrize("key", FIXED_THROUGH_WRAPPERS)
def test_the_fix_is_offered_and_proven(key):
    fix_proof.assert_proven(key)


@pytest.mark.parametrize(("code", "sole"), [
    ("x = f()", "x = f()"),
    ("if c:\n    x = f()", "x = f()"),
    ("try:\n    with m:\n        x = f()\nfinally:\n    pass", "x = f()"),
    ("for _ in range(1):\n    x = f()\n    pass", "x = f()"),
    ("if c:\n    x = f()\nelse:\n    y = g()", None),  # two statements
    ("if c:\n    def h():\n        return 1", None),  # a definition
])
def test_sole_statement(code, sole):
    found = statements.sole_statement(ast.parse(code).body[0])
    assert (ast.unparse(found) if found is not None else None) == sole
