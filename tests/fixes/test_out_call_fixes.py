"""GG106 where the ``out=`` call is a lambda's body that spreads its caller's ``**kwargs``
(``op = lambda t, **kw: torch.exp(t, **kw)``; ``op(init, out=logits)``): the engine writes the call out with the
caller's keywords, a call that is not in the file, so the fix reads the run instead -- the lambda it entered at the
caller's call, a statement of its own handing it ``out=`` -- and makes that call under ``torch.no_grad()`` when the
bare call would be (plain values into a leaf, or a parameter's update).  And a helper's ``out=`` into its parameter, a
plain tensor only its caller holds, is computed out of place there, returned, and rebound by each call
(``callers.through_callers``).  Each variant below had no fix before; its fix is now offered and proven by torch."""

from __future__ import annotations

import pytest
from variants import fix_proof

FIXED_AT_THE_CALL = [
    "GG106/pos_out_tensor_itself_requires_grad::lambda_call",
    "GG106/pos_weight_clip_out_after_step::lambda_call",
    "GG106/pos_scratch_buffer_from_hidden::helper_function",
    "GG106/pos_scratch_buffer_from_hidden::callable_class",
]


@pytest.mark.parametrize("key", FIXED_AT_THE_CALL)
def test_the_fix_is_offered_and_proven(key):
    fix_proof.assert_proven(key)
