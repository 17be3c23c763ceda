"""The abstract state of one running frame (its variables, grad mode), and grad mode's spellings."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .values import Value, grown, join

GRAD_OFF_CONTEXTS = {"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad"}
GRAD_ON_CONTEXTS = {"torch.enable_grad", "torch.autograd.enable_grad"}
SET_GRAD = {"torch.set_grad_enabled", "torch.autograd.set_grad_enabled"}
INFERENCE_MODE = "torch.inference_mode"
GRAD_MODES = GRAD_OFF_CONTEXTS | GRAD_ON_CONTEXTS | SET_GRAD  # a block of any of them may change grad mode


def turns_grad_off(qual: str | None, node: ast.expr, inference: bool = True) -> bool:
    """Is ``node``, a call of ``qual``, a block or decorator that turns grad mode off: ``torch.no_grad()``,
    ``torch.set_grad_enabled(False)``, and with ``inference`` ``torch.inference_mode()`` (or ``(True)``)?"""
    if not isinstance(node, ast.Call) or node.keywords:
        return False
    one = node.args[0].value if len(node.args) == 1 and isinstance(node.args[0], ast.Constant) else None
    if qual in SET_GRAD:
        return one is False
    if qual == INFERENCE_MODE:
        return inference and (not node.args or one is True)
    return qual in GRAD_OFF_CONTEXTS and not node.args


@dataclass
class State:
    env: dict[str, Value] = field(default_factory=dict)
    grad_enabled: bool = True
    # This path has returned: the statements after it do not run on it, and a join takes the other path's values.
    returned: bool = False
    # Names bound as a second name of another name's tensor (`out = x`): name -> (that statement, the other name).
    aliases: dict[str, tuple[ast.stmt, str]] = field(default_factory=dict)

    def copy(self) -> "State":
        return State(dict(self.env), self.grad_enabled, self.returned, dict(self.aliases))


_ABSENT = object()  # a name one path does not bind


def merge_states(a: State, b: State, after_loop: bool = False) -> State:
    """The state after two paths meet: each name's values joined; a path that returned adds nothing. After a
    loop (``a`` the state before it, ``b`` after its iterations) a list it grew is the grown list."""
    if a.returned != b.returned:
        return (b if a.returned else a).copy()
    env = {}
    a_env, b_env = a.env, b.env
    # ``a``'s names, then those only ``b`` binds (no set of both made: a join per ``if`` and loop).
    for name, x in a_env.items():
        y = b_env.get(name, _ABSENT)
        # Most names have the same value on both paths (``join`` and ``grown`` would give it back unchanged).
        if x is y or y is _ABSENT:
            env[name] = x
        else:
            env[name] = (after_loop and grown(x, y)) or join(x, y)
    for name, y in b_env.items():
        if name not in env:
            env[name] = y
    # A second name made on one path only (the other never bound it: a loop or a branch that made it) stays one.
    aliases = {name: site for x, y in ((a, b), (b, a)) for name, site in x.aliases.items()
               if y.aliases.get(name) == site or name not in y.env}
    return State(env, a.grad_enabled or b.grad_enabled, a.returned, aliases)
