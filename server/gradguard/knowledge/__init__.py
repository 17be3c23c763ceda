"""What torch saves for backward, which ops are in-place or views: read from ``torch_ops.json``.

The json is generated from the installed torch by ``python -m gradguard.knowledge.generate``;
this loader never imports torch, so static analysis works without it.
"""
from __future__ import annotations

import copy
import functools
from functools import cached_property
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

__all__ = ["OpInfo", "Overload", "ModuleInfo", "TorchKnowledge", "load_knowledge", "TABLE_PATH"]

TABLE_PATH = Path(__file__).with_name("torch_ops.json")
THIRD_PARTY_VIEWS_PATH = Path(__file__).with_name("third_party_views.json")
FORMAT = 1


@dataclass(frozen=True)
class Overload:
    """One schema of an op: ``kinds`` of its positional arguments ("T" tensor or tensor list, "S" anything
    else), how many are required, its argument names (None: a Python function, any keyword), what it saves."""

    kinds: str
    required: int
    names: frozenset[str] | None
    saves_args: Mapping[int, frozenset[int]] = field(hash=False)
    saves_result: frozenset[int]
    positional: tuple[str, ...] | None = None  # the positional arguments' names, in order

    def accepts(self, kinds: tuple[str | None, ...], keywords: Mapping[str, str | None], strict: bool) -> bool:
        """Could a call with these positional argument kinds (None: unknown) and keyword arguments (name -> kind)
        bind here?  A keyword fills the position of the argument of its name.  Not strict: a number may stand for
        a tensor (torch wraps it)."""
        if self.names is not None and not keywords.keys() <= self.names:
            return False
        given = list(kinds)
        if keywords and self.positional is not None:
            for position, name in enumerate(self.positional):
                if name in keywords and position >= len(kinds):  # `pow(x, exponent=2.0)`: a positional by name
                    given.extend([None] * (position + 1 - len(given)))  # skipped ones keep their defaults
                    given[position] = keywords[name]
        if not self.required <= len(given) <= len(self.kinds):
            return False
        return all(k is None or k == f or (not strict and k == "S") for k, f in zip(given, self.kinds))


@dataclass(frozen=True)
class OpInfo:
    """One Python-visible op (all overloads merged).

    ``saves_args[k]``: argument ``k`` is saved for backward when any of these positions requires grad.
    ``saves_result``: the result is saved when any of these positions requires grad.
    """

    name: str
    saves_args: Mapping[int, frozenset[int]] = field(hash=False)
    saves_result: frozenset[int]
    view: bool
    multi_view: str | None
    differentiable: bool
    returns: str = "tensor"  # "tensor", "sequence" (Tensor[]: split, unbind, tensor_split) or "tuple" (max(x, dim))
    # What the overloads returning a tuple save (max(x, dim) saves indices, not x); None: no such overload.
    tuple_saves_args: Mapping[int, frozenset[int]] | None = field(default=None, hash=False)
    # The position of each tensor argument by its schema name (``self``, ``other``): a tensor passed by keyword.
    params: Mapping[str, int] = field(default_factory=dict, hash=False)
    overloads: tuple[Overload, ...] = ()

    def saves_for(self, kinds: tuple[str | None, ...], keywords: Mapping[str, str | None] = MappingProxyType({})
                  ) -> tuple[Mapping[int, frozenset[int]], frozenset[int]]:
        """What a call of this shape saves: the overloads it can bind to (those whose kinds match exactly,
        else those a wrapped number fits), their saves united; every overload's when none fits."""
        fits = [o for o in self.overloads if o.accepts(kinds, keywords, strict=True)] or [
            o for o in self.overloads if o.accepts(kinds, keywords, strict=False)]
        if not fits:
            return self.saves_args, self.saves_result
        saves: dict[int, frozenset[int]] = {}
        for o in fits:
            for pos, conds in o.saves_args.items():
                saves[pos] = saves.get(pos, frozenset()) | conds
        return saves, frozenset().union(*(o.saves_result for o in fits))


@dataclass(frozen=True)
class ModuleInfo:
    """An ``nn.Module`` class.  Conditions are "input" (input requires grad) / "params" (parameters do)."""

    name: str
    saves_input: frozenset[str]
    saves_output: frozenset[str]
    saves_params: frozenset[str]
    has_params: bool
    functional: str | None
    inplace_kwarg: bool
    returns: str = "tensor"  # "tuple" for LSTM/GRU/RNN/MultiheadAttention: (output, state)
    bases: tuple[str, ...] = ()  # its torch classes, itself first: what isinstance(m, nn.X) is true for
    # its own parameters' names, a layer or direction index written `{n}` (`weight`, `bias_hh_l{n}_reverse`)
    param_names: frozenset[str] = frozenset()

    def has_parameter(self, name: str) -> bool:
        """``name`` (``bias_hh_l0``, or a template ``bias_hh_l{n}``) is one of this class's parameters."""
        return re.sub(r"\d+", "{n}", name) in self.param_names


class TorchKnowledge:
    """Read-only view of one generated table."""

    def __init__(self, data: Mapping, third_party_views: Mapping[str, str] = MappingProxyType({})):
        if data.get("format") != FORMAT:
            raise ValueError(f"torch_ops.json format {data.get('format')!r}, expected {FORMAT}")
        self.torch_version: str = data["torch_version"]
        self._ops = {name: _op(name, d) for name, d in data["ops"].items()}
        self._inplace: dict[str, str | None] = dict(data["inplace"])
        self._modules = {name: _module(name, d) for name, d in data["modules"].items()}
        self.inplace_kwarg_functions: frozenset[str] = frozenset(data["inplace_kwarg"]["functions"])
        self.inplace_kwarg_modules: frozenset[str] = frozenset(data["inplace_kwarg"]["modules"])
        self._third_party_views = dict(third_party_views)
        self.integral_results: frozenset[str] = frozenset(data.get("integral_results", ()))
        self.integral_dtypes: frozenset[str] = frozenset(data.get("integral_dtypes", ()))
        self.module_wrappers: frozenset[str] = frozenset(data.get("module_wrappers", ()))
        self.tensor_constructors: frozenset[str] = frozenset(data.get("tensor_constructors", ()))
        self.autograd_function_bases: frozenset[str] = frozenset(data.get("autograd_function_bases", ()))
        self.backward_hook_registrations: frozenset[str] = frozenset(data.get("backward_hook_registrations", ()))
        # Out-of-place names whose in-place form (`leaky_relu_`, `F.leaky_relu(x, inplace=True)`) saves its result
        self.inplace_result_saved: frozenset[str] = frozenset(data.get("inplace_result_saved", ()))
        # Activations whose in-place backward refuses a negative parameter (`F.leaky_relu_(x, -2)`): name ->
        # {"param", "position" (in the `F` function), "modules" (class -> position in its constructor), "error"}
        self.inplace_sign_refused: Mapping[str, Mapping] = MappingProxyType(dict(data.get("inplace_sign_refused", {})))
        # "Tensor", "torch", "torch.nn.functional", "torch.nn.Module" -> their public names
        self.python_names: Mapping[str, frozenset[str]] = MappingProxyType(
            {owner: frozenset(names) for owner, names in data.get("python_names", {}).items()})
        # Dtypes (see generate.py's dtype section): "torch.<name>" -> canonical name; the floating ones; the
        # default; op name -> the dtype of its result whatever its input's; ops whose result has their floating /
        # integer input's dtype; conversions that return the tensor itself when it has the dtype already (by
        # name: `.float()`; by argument: `.to(torch.float32)` "dtype", `.type_as(y)` "tensor"); factories' dtypes.
        dtypes = data.get("dtypes", {})
        self.dtype_names: Mapping[str, str] = MappingProxyType(dict(dtypes.get("names", {})))
        self.floating_dtypes: frozenset[str] = frozenset(dtypes.get("floating", ()))
        self.default_dtype: str | None = dtypes.get("default")
        results = dtypes.get("results", {})
        self.fixed_dtypes: Mapping[str, str] = MappingProxyType(dict(results.get("fixed", {})))
        self.keeps_float: frozenset[str] = frozenset(results.get("keeps_float", ()))
        self.keeps_int: frozenset[str] = frozenset(results.get("keeps_int", ()))
        self.dtype_argument: frozenset[str] = frozenset(results.get("dtype_argument", ()))
        self.self_when_same: Mapping[str, str] = MappingProxyType(dict(results.get("self_when_same", {})))
        self.dtype_conversions: Mapping[str, frozenset[str]] = MappingProxyType(
            {k: frozenset(v) for k, v in dtypes.get("conversions", {}).items()})
        self.factory_dtypes: Mapping[str, str] = MappingProxyType(dict(dtypes.get("factories", {})))
        # Tensor attributes that share its memory: "view" (autograd's view: ``T``, ``mH``) or "detached" (``data``)
        self.attribute_views: Mapping[str, str] = MappingProxyType(dict(data.get("attribute_views", {})))

    def with_views(self, qualnames: tuple[str, ...]) -> "TorchKnowledge":
        """This table with the user's own view functions added (``view-functions`` in ``[tool.gradguard]``)."""
        if not qualnames:
            return self
        extended = copy.copy(self)
        extended._third_party_views = {**self._third_party_views,
                                       **{q: "a view function named in view-functions" for q in qualnames}}
        return extended

    def is_integral(self, dtype: str | None) -> bool:
        """An integer or bool dtype (canonical name): its tensors never require grad."""
        return dtype is not None and dtype in self.integral_dtypes

    @property
    def third_party_views(self) -> frozenset[str]:
        return frozenset(self._third_party_views)

    def third_party_view(self, qualname: str) -> str | None:
        """Why a function outside torch returns a view of its first argument (``einops.rearrange``), or None."""
        return self._third_party_views.get(qualname)

    def op(self, name: str) -> OpInfo | None:
        return self._ops.get(name)

    def inplace_twin(self, name: str) -> str | None:
        """``"add_"`` -> ``"add"``; None when ``name`` is not in-place or has no out-of-place twin."""
        return self._inplace.get(name)

    def is_inplace(self, name: str) -> bool:
        """Does ``name`` write tensor data in place?  (``requires_grad_`` and ``detach_`` do not.)"""
        return name in self._inplace

    def module(self, class_name: str) -> ModuleInfo | None:
        return self._modules.get(class_name)

    @property
    def op_names(self) -> frozenset[str]:
        return frozenset(self._ops)

    @property
    def module_names(self) -> frozenset[str]:
        return frozenset(self._modules)

    @cached_property
    def tensor_methods(self) -> frozenset[str]:
        """The ops a tensor's method call may be (``loss.mean()``), but for those a layer is commonly held under
        (``self.linear(x)``, ``self.relu(h)``: a module's forward)."""
        return self.op_names - {name.lower() for name in self._modules}

    @property
    def inplace_names(self) -> frozenset[str]:
        return frozenset(self._inplace)


def _op(name: str, d: Mapping) -> OpInfo:
    return OpInfo(
        name=name,
        saves_args=MappingProxyType({int(k): frozenset(v) for k, v in d["saves_args"].items()}),
        saves_result=frozenset(d["saves_result"]),
        view=bool(d["view"]),
        multi_view=d["multi_view"],
        differentiable=bool(d["differentiable"]),
        returns=d.get("returns", "tensor"),
        tuple_saves_args=None if d.get("tuple_saves_args") is None else MappingProxyType(
            {int(k): frozenset(v) for k, v in d["tuple_saves_args"].items()}),
        params=MappingProxyType(dict(d.get("params", {}))),
        overloads=tuple(Overload(o["kinds"], o["required"], None if o["names"] is None else frozenset(o["names"]),
                                 MappingProxyType({int(k): frozenset(v) for k, v in o["saves_args"].items()}),
                                 frozenset(o["saves_result"]),
                                 None if o["names"] is None else tuple(o["names"][:len(o["kinds"])]))
                        for o in d.get("overloads", ())),
    )


def _module(name: str, d: Mapping) -> ModuleInfo:
    return ModuleInfo(
        name=name,
        saves_input=frozenset(d["saves_input"]),
        saves_output=frozenset(d["saves_output"]),
        saves_params=frozenset(d["saves_params"]),
        has_params=bool(d["has_params"]),
        functional=d["functional"],
        inplace_kwarg=bool(d["inplace_kwarg"]),
        returns=d.get("returns", "tensor"),
        bases=tuple(d.get("bases", ())),
        param_names=frozenset(d.get("param_names", ())),
    )


@functools.lru_cache(maxsize=None)
def load_knowledge() -> TorchKnowledge:
    """The shipped table, loaded once."""
    with TABLE_PATH.open(encoding="utf-8") as f:
        data = json.load(f)
    with THIRD_PARTY_VIEWS_PATH.open(encoding="utf-8") as f:
        views = json.load(f)["views"]
    return TorchKnowledge(data, views)
