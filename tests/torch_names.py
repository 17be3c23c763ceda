"""What torch calls the ops that gradguard's static analysis names, asked of torch by running them.

The static side names a saving op as the user wrote it (``torch.sigmoid``, ``F.softmax``, ``.amax()``,
``nn.Linear``, ``*``, ``torch.distributions.Categorical(logits=...)``); the probe names the aten op that
saved the tensor (``sigmoid``, ``_softmax``, ``amax``, ``addmm``, ``mul``, ``logsumexp``).  Rather than a
table written from memory, ``saving_ops`` runs the op on small tensors that require grad, in every call form
torch accepts, and records which aten ops saved tensors, the same way the probe's tracer does (an input is
packed just before its op is dispatched, an output just after).  ``multi_view_node`` does the same for the
functions that return several views: it reads ``grad_fn.name()`` of a piece.
"""

from __future__ import annotations

import functools
import re
import warnings
from typing import Callable

import torch
import torch.nn.functional as F
from torch.autograd.graph import saved_tensors_hooks
from torch.utils._python_dispatch import TorchDispatchMode

_NAMESPACE = {"torch": torch, "F": F, "nn": torch.nn}
_SHAPES = ((4, 4), (1, 4, 4, 4), (2, 3, 4))
# Extra arguments after the tensor, tried in turn (u: a second tensor that requires grad, m: a bool mask,
# i: an index tensor of the same shape, as gather/scatter/take_along_dim take; c: class targets, one per row of
# the tensor, as nll_loss and cross_entropy take).
_ARGS = ((), (-1,), (2,), (0.0,), ("u",), ("m", 0.0), (-1, "i"), ("c",))
_CTOR_ARGS = ((), (4,), (4, 4), (4, 4, 1))
_NODE = re.compile(r"Backward(\d*)$")


def node_name(name: str) -> str:
    """torch's messages drop ``Backward`` and a ``0`` overload from ``grad_fn.name()``: ``SplitBackward0``
    -> ``Split`` (as the probe's tracer does)."""
    return _NODE.sub(lambda m: "" if m.group(1) in ("", "0") else m.group(1), name)


class _Savers(TorchDispatchMode):
    """The aten ops that save tensors for backward while it is installed (with ``saved_tensors_hooks``)."""

    def __init__(self):
        super().__init__()
        self.ops: set[str] = set()
        self.inputs = 0
        self.last: str | None = None

    def pack(self, t):
        grad_fn = t.grad_fn
        if grad_fn is not None and grad_fn._sequence_nr() == torch._C._autograd._get_sequence_nr() - 1:
            self.ops.add(self.last)  # an output of the op just dispatched
        else:
            self.inputs += 1  # an input of the op about to be dispatched
        return t

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if self.inputs:
            self.ops.add(name)
            self.inputs = 0
        out = func(*args, **(kwargs or {}))
        self.last = name
        return out


def _forms(label: str) -> list[Callable]:
    """Ways to call what ``label`` names, each a function of (t, u, m)."""
    if label.startswith("."):
        name = label[1:].removesuffix("()")
        return [lambda t, u, m, a=a: getattr(t, name)(*_bind(a, u, m)) for a in _ARGS]
    if label.startswith("nn.") and isinstance(getattr(torch.nn, label[3:], None), type):
        cls = getattr(torch.nn, label[3:])
        return [lambda t, u, m, c=c: cls(*c)(t) for c in _CTOR_ARGS]
    if "(" in label:  # a call written out, with `...` for the tensor: Categorical(logits=...)
        expression = label.replace("...", "t")
        return [lambda t, u, m: eval(expression, _NAMESPACE, {"t": t})]
    if re.fullmatch(r"[A-Za-z_][\w.]*", label):
        try:
            fn = eval(label, _NAMESPACE)
        except (AttributeError, NameError):
            return []
        # and a function that takes an equation first (`torch.einsum("ab,ab->ab", t, u)`)
        return [*(lambda t, u, m, a=a: fn(t, *_bind(a, u, m)) for a in _ARGS),
                *(lambda t, u, m, c=c: fn(_equation(t, c), t, u) for c in (False, True))]
    return [lambda t, u, m: eval(f"t {label} u", {}, {"t": t, "u": u})]  # an operator: *, @, **, /


def _equation(t, contract: bool) -> str:
    """An einsum equation for two tensors of ``t``'s shape: elementwise, or a product over the last dim."""
    a = "abcdefgh"[:t.dim()]
    if not contract or t.dim() < 2:
        return f"{a},{a}->{a}"
    b = a[:-2] + a[-1] + "z"
    return f"{a},{b}->{a[:-1]}z"


def _bind(args: tuple, u, m) -> tuple:
    index = torch.zeros_like(m, dtype=torch.long)
    classes = torch.zeros(m.shape[0], dtype=torch.long)
    return tuple(u if a == "u" else m if a == "m" else index if a == "i" else classes if a == "c" else a
                 for a in args)


@functools.lru_cache(maxsize=None)
def saving_ops(label: str) -> frozenset[str] | None:
    """The aten ops that save tensors when ``label`` runs, over every call form and shape torch accepts;
    None when torch accepts none of them (the label cannot be checked)."""
    found: set[str] = set()
    ran = False
    for form in _forms(label):
        for shape in _SHAPES:
            t = torch.randn(shape, requires_grad=True)
            if label.endswith("_"):  # an in-place op (`F.elu_`): torch refuses it on a leaf that requires grad
                t = t * 1
            u = torch.randn(shape, requires_grad=True)
            m = torch.rand(shape) > 0.5
            savers = _Savers()
            try:
                with warnings.catch_warnings(), saved_tensors_hooks(savers.pack, lambda x: x), savers:
                    warnings.simplefilter("ignore")
                    form(t, u, m)
            except Exception:  # noqa: BLE001 - a call form this op does not take
                continue
            ran = True
            found |= savers.ops
    return frozenset(found) if ran else None


@functools.lru_cache(maxsize=None)
def tensor_method(name: str) -> bool:
    """Whether ``t.<name>(...)`` is a method of torch's tensors (not a name of the user's: a lambda or a
    ``functools.partial`` bound to a variable, whose torch op only the analysis followed)."""
    return callable(getattr(torch.Tensor, name, None))


def multi_view_node(function: str) -> str | None:
    """The node torch names for a piece returned by ``t.<function>(...)`` (``chunk`` -> ``Split``)."""
    t = torch.randn(4, 4, requires_grad=True) * 1
    for args in ((2,), (0,), ()):
        try:
            pieces = getattr(t, function)(*args)
        except Exception:  # noqa: BLE001
            continue
        if isinstance(pieces, (tuple, list)) and pieces and pieces[0].grad_fn is not None:
            return node_name(pieces[0].grad_fn.name())
    return None


def iteration_node() -> str:
    """The node torch names for an element of ``a, b = t`` / ``for row in t``."""
    t = torch.randn(2, 3, requires_grad=True) * 1
    first, _ = t
    return node_name(first.grad_fn.name())
