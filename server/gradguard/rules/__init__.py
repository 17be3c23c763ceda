"""The rule registry.  One module per rule; each defines ``RULE``.

``RULES_IN_PRECEDENCE`` is the order the engine asks rules about one event: a call torch refuses
before it writes anything (GG106) comes first; then an error torch raises at the write itself (GG105, GG004, GG003, GG002; GG104 when that write is an
element loop's) hides the errors that would only come at backward (GG101, GG102, GG005, GG001).
"""

from __future__ import annotations

from . import (
    gg001_saved_tensor_mutated,
    gg002_leaf_mutated,
    gg003_leaf_view_mutated,
    gg004_multi_view_mutated,
    gg005_inplace_activation_on_saved,
    gg101_optimizer_step_before_backward,
    gg102_silent_data_write,
    gg103_graph_break,
    gg104_element_loop_write,
    gg105_nograd_view_mutated,
    gg106_out_requires_grad,
    gg107_grad_of_overwritten,
    gg108_hook_writes_gradient,
    gg109_leaf_rebound_under_no_grad,
    gg110_discarded_update,
)
from .base import Example, Rule

ALL_RULES: tuple[Rule, ...] = tuple(
    m.RULE
    for m in (
        gg001_saved_tensor_mutated,
        gg002_leaf_mutated,
        gg003_leaf_view_mutated,
        gg004_multi_view_mutated,
        gg005_inplace_activation_on_saved,
        gg101_optimizer_step_before_backward,
        gg102_silent_data_write,
        gg103_graph_break,
        gg104_element_loop_write,
        gg105_nograd_view_mutated,
        gg106_out_requires_grad,
        gg107_grad_of_overwritten,
        gg108_hook_writes_gradient,
        gg109_leaf_rebound_under_no_grad,
        gg110_discarded_update,
    )
)
RULES_BY_CODE: dict[str, Rule] = {r.code: r for r in ALL_RULES}
RULES_IN_PRECEDENCE: tuple[Rule, ...] = tuple(
    RULES_BY_CODE[c]
    for c in ("GG106", "GG105", "GG104", "GG004", "GG003", "GG002", "GG101", "GG102", "GG005", "GG001", "GG107", "GG103", "GG108", "GG109", "GG110")
)

__all__ = ["ALL_RULES", "RULES_BY_CODE", "RULES_IN_PRECEDENCE", "Example", "Rule"]
