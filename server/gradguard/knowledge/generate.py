"""Generate ``torch_ops.json``: what the *installed* torch saves for backward.

    PYTHONPATH=server python -m gradguard.knowledge.generate [--check]

Two sources are combined:

* static: ``derivatives.yaml`` + ``native_functions.yaml`` shipped with torchgen say, per native
  op, which inputs/outputs each derivative formula saves and which returns alias ``self``;
* empirical: Python-visible callables run on small tensors; the ``_saved_*`` attributes of the
  autograd graph they build are matched to the inputs/outputs by storage.

The empirical answer wins where both exist (it sees composite ops and Python-level signatures);
disagreements are printed.  ``--check`` regenerates in memory and fails if the shipped json differs.
"""
from __future__ import annotations

import argparse
import inspect
import json
import re
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from gradguard.knowledge import Overload
from gradguard.knowledge.names import FACTORIES

OUT = Path(__file__).with_name("torch_ops.json")
FORMAT = 1
FIELDS = ("saves_args", "saves_result", "view", "multi_view", "differentiable")
TENSOR = "BaseCType(type=BaseCppType(ns='at', name='Tensor'))"
TENSOR_TYPE = re.compile(r"name='Tensor(List)?'\)")   # Tensor, Tensor?, Tensor[], Tensor?[]
# Python-level Tensor methods (not in native_functions.yaml) that write data without a version bump
PY_DATA_WRITERS = ("apply_", "map_", "map2_")


def visible(name: str) -> bool:
    """Can user code call ``name`` as ``torch.X``, ``Tensor.X`` or ``F.X``?"""
    return any(callable(getattr(ns, name, None)) and not inspect.ismodule(getattr(ns, name))
               for ns in (torch, torch.Tensor, F))


def quiet(fn, *args, **kw):
    """Call ``fn`` with warnings (deprecations, implicit softmax dim...) silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kw)


# ------------------------------------------------------------------------------------ static
def load_static():
    """Parse torchgen's packaged yaml: Default-dispatch derivative infos + every native function."""
    import torchgen
    from torchgen.gen import parse_native_yaml
    from torchgen.packaged.autograd.load_derivatives import load_derivatives

    root = Path(torchgen.__file__).parent / "packaged"
    native, tags = root / "ATen/native/native_functions.yaml", root / "ATen/native/tags.yaml"
    infos, _ = load_derivatives(str(root / "autograd/derivatives.yaml"), str(native), str(tags))
    by_schema = {str(p["Default"].func.func): p["Default"] for p in infos.values() if "Default" in p}
    return by_schema, parse_native_yaml(str(native), str(tags)).native_functions


def alias_kind(schema) -> str | None:
    """'view' if return 0 aliases ``self`` without writing (``Tensor(a)``), 'multi' for ``Tensor(a)[]``."""
    sa, rets = schema.arguments.self_arg, schema.returns
    if sa is None or not rets or rets[0].annotation is None or sa.argument.annotation is None:
        return None
    ra, aa = rets[0].annotation, sa.argument.annotation
    if ra.is_write or not set(ra.alias_set) & set(aa.alias_set):
        return None
    return "multi" if str(rets[0].type) == "Tensor[]" else "view"


def save_condition(s, info, awd: list, pos: dict) -> set:
    """Positions whose requires_grad makes autograd save input ``s``.  Mirrors ``guard_for`` in
    torchgen's gen_variable_type.py: unguarded inputs are saved whenever a grad_fn is created."""
    everything = {pos[a] for a in awd if a in pos}
    used_in = [d for d in info.derivatives if s in d.saved_inputs]
    if (len(awd) <= 1 or "backward" in info.name or len(used_in) != 1 or str(s.nctype.type) != TENSOR
            or any(a.type.is_list_like() for a in info.func.func.arguments.flat_non_out if a.name in awd)):
        return everything
    d = used_in[0]
    if len(d.var_names) == 1:
        return {pos[v] for v in d.var_names if v in pos}
    m = re.search(rf"wrap_opt_if\({s.nctype.name},(.*?)\)", d.formula)
    if m is None:
        return everything
    edges = [awd[int(k)] for k in re.findall(r"grad_input_mask\[(\d+)\]", m.group(1)) if int(k) < len(awd)]
    return {pos[a] for a in edges if a in pos}


def static_entry(schema, info) -> dict:
    """One overload's entry from its schema and (optional) derivatives.yaml info."""
    pos = {a.name: k for k, a in enumerate(schema.arguments.flat_positional)}   # kwarg-only: no position
    n = len(schema.returns)
    ret = {(r.name or ("result" if n == 1 else f"result{k}")): k for k, r in enumerate(schema.returns)}
    out_diff = info.output_differentiability if info and info.output_differentiability else [True] * n
    saves, result = {}, set()
    if info is not None:
        names = {v for d in info.derivatives for v in d.var_names}
        awd = [a.name for a in schema.arguments.flat_non_out if a.name in names]   # "args_with_derivatives"
        for s in info.all_saved_inputs:
            if s.nctype.name in pos and TENSOR_TYPE.search(str(s.nctype.type)):
                saves.setdefault(pos[s.nctype.name], set()).update(save_condition(s, info, awd, pos))
        # outputs are saved unconditionally once a grad_fn exists; "the result" is return 0
        if n and out_diff[0] and any(ret.get(o.nctype.name) == 0 for o in info.all_saved_outputs):
            result = {pos[a] for a in awd if a in pos}
    kind, multi = alias_kind(schema), None
    if kind == "multi":   # composite ops have no info: guess a node name, the probe corrects it
        multi = (re.sub(r"Backward\d*$", "", info.op) if info and info.op
                 else "".join(w.title() for w in schema.name.name.base.split("_")))
    returns = "sequence" if n and str(schema.returns[0].type).endswith("[]") else "tuple" if n > 1 else "tensor"
    return {"saves_args": saves, "saves_result": result, "view": kind is not None, "multi_view": multi,
            "differentiable": bool(info.derivatives) and any(out_diff) if info else kind is not None,
            "returns": returns, "sources": {"derivatives.yaml" if info else "native_functions.yaml"},
            # max(x, dim) saves indices where max(x) saves x: keep the tuple overloads' saves apart
            "tuple_saves_args": {k: set(v) for k, v in saves.items()} if returns == "tuple" else {},
            "tuple_overload": returns == "tuple"}


def merge(a: dict | None, b: dict) -> dict:
    """Union of two entries: overloads of one name (mul.Tensor + mul.Scalar), or several probes."""
    if a is None:
        return {**b, "saves_args": {k: set(v) for k, v in b["saves_args"].items()},
                "tuple_saves_args": {k: set(v) for k, v in b.get("tuple_saves_args", {}).items()},
                "saves_result": set(b["saves_result"]), "sources": set(b["sources"])}
    for k, v in b.get("tuple_saves_args", {}).items():
        a.setdefault("tuple_saves_args", {}).setdefault(k, set()).update(v)
    a["tuple_overload"] = a.get("tuple_overload", False) or b.get("tuple_overload", False)
    for k, v in b["saves_args"].items():
        a["saves_args"].setdefault(k, set()).update(v)
    for f in ("saves_result", "sources"):
        a[f] |= b[f]
    a["view"] |= b["view"]
    a["differentiable"] |= b["differentiable"]
    a["multi_view"] = a["multi_view"] or b["multi_view"]
    if a.get("returns", "tensor") == "tensor":  # overloads differ (max(x) vs max(x, dim)): keep the non-tensor shape
        a["returns"] = b.get("returns", "tensor")
    return a


def static_ops(by_schema, funcs) -> tuple[dict, dict]:
    """Functional, public, Python-visible ops that have a derivative formula or alias ``self``; and every
    overload of those names with what it saves (``pow(x, 2.0)`` saves ``x``, ``pow(x, y)`` also its result)."""
    ops, overloads = {}, {}
    for f in funcs:
        name = f.func.name.name
        if (f.func.kind().name != "functional" or name.dunder_method or name.base.startswith("_")
                or not visible(name.base)):
            continue
        info = by_schema.get(str(f.func))
        entry = static_entry(f.func, info)
        overloads.setdefault(name.base, []).append({**signature(f.func), "saves_args": entry["saves_args"],
                                                    "saves_result": entry["saves_result"]})
        if info is not None or alias_kind(f.func) is not None:   # else only a probe can tell
            ops[name.base] = merge(ops.get(name.base), entry)
    return ops, overloads


def signature(schema) -> dict:
    """How a call is matched to an overload: the kind of each positional argument ("T" a tensor or a list of
    them, "S" anything else: a number, a dim, a size), how many are required, and every argument's name."""
    positional = schema.arguments.flat_positional
    return {"kinds": "".join("T" if str(a.type).startswith("Tensor") else "S" for a in positional),
            "required": sum(a.default is None for a in positional),
            "names": [a.name for a in schema.arguments.flat_non_out]}


def tensor_params(funcs) -> dict:
    """Every functional op's tensor arguments by name -> position (the first overload's name wins), from the
    schemas, whether or not the op has a derivative formula of its own (``log_softmax`` is composite)."""
    params: dict[str, dict] = {}
    for f in funcs:
        name = f.func.name.name
        if f.func.kind().name != "functional" or name.dunder_method or not visible(name.base):
            continue
        found = {a.name: k for k, a in enumerate(f.func.arguments.flat_positional) if str(a.type).startswith("Tensor")}
        params[name.base] = {**found, **params.get(name.base, {})}
    return params


def python_params(name: str) -> dict:
    """Argument positions of a function written in Python (``F.cross_entropy(input, target, ...)``), which
    has no schema: every positional parameter, since its signature does not say which take tensors."""
    for owner in (torch.nn.functional, torch):
        fn = getattr(owner, name, None)
        try:
            signature = inspect.signature(fn) if callable(fn) else None
        except (TypeError, ValueError):
            signature = None
        if signature is not None:
            return {p.name: k for k, p in enumerate(signature.parameters.values())
                    if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)}
    return {}


def writes_data(name: str) -> bool | None:
    """Does ``Tensor.name`` bump the version counter for some simple call?  None if none succeeds."""
    bumps = []
    for args in ((), (torch.rand(5, 5),), (torch.rand(4, 4),), (0.5,), (0,), (0, 1)):
        x = torch.rand(4, 4)
        v = x._version
        try:
            quiet(getattr(x, name), *args)
        except Exception:
            continue
        bumps.append(x._version > v)
    return any(bumps) if bumps else None


def inplace_names(funcs) -> tuple[dict, list]:
    """In-place name -> out-of-place twin.  The schema must write ``self`` (``Tensor(a!) self``), and
    methods that still never bump the version counter (requires_grad_, detach_) are dropped."""
    table, dropped = {}, set()
    for f in funcs:
        n, sa = f.func.name.name, f.func.arguments.self_arg
        name = str(n)
        if (not n.inplace or n.dunder_method or n.base.startswith("_") or not visible(name) or sa is None
                or sa.argument.annotation is None or not sa.argument.annotation.is_write
                or name in table or name in dropped):
            continue
        if hasattr(torch.Tensor, name) and writes_data(name) is False:
            dropped.add(name)
        else:
            table[name] = n.base if visible(n.base) else None
    for name in (k for k in dir(F) if k.endswith("_") and not k.startswith("_")):   # F.relu_, F.elu_...
        table.setdefault(name, name[:-1] if visible(name[:-1]) else None)
    table.update(dict.fromkeys(PY_DATA_WRITERS))
    return table, sorted(dropped)


# --------------------------------------------------------------------------------- empirical
class T:
    """Tensor placeholder: kind f = float that may require grad, n = float constant, i = long, b = bool."""

    def __init__(self, *shape, kind="f", hi=3):
        self.shape, self.kind, self.hi = shape, kind, hi

    def make(self, grad: bool) -> torch.Tensor:
        if self.kind == "i":
            return torch.randint(0, self.hi, self.shape)
        if self.kind == "b":
            return torch.rand(self.shape) > 0.5
        x = torch.rand(self.shape) * 0.8 + 0.1   # inside every common domain (log, sqrt, asin, bce)
        return x.requires_grad_(grad and self.kind == "f")


def _tensors(obj) -> list:
    """Tensors in a (nested) tuple/list result, e.g. ``torch.return_types`` or LSTM's (out, (h, c))."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    return [x for o in obj for x in _tensors(o)] if isinstance(obj, (tuple, list)) else []


def _ptr(x) -> int | None:
    try:
        return x.untyped_storage().data_ptr() or None
    except Exception:
        return None


def saved_ptrs(outputs) -> set:
    """Storages of every tensor saved by the graph behind ``outputs`` (stops at AccumulateGrad)."""
    stack, seen, ptrs = [o.grad_fn for o in outputs if o.grad_fn is not None], [], set()
    while stack:
        node = stack.pop()
        if node is None or any(node is s for s in seen) or type(node).__name__ == "AccumulateGrad":
            continue
        seen.append(node)
        for attr in dir(node):
            if attr.startswith("_saved_") or attr == "saved_tensors":   # the latter: Python Functions
                try:
                    ptrs.update(p for p in map(_ptr, _tensors(getattr(node, attr))) if p)
                except Exception:
                    pass
        stack.extend(fn for fn, _ in node.next_functions)
    return ptrs


def _run(fn, args, kw, grad, nonleaf0=False):
    """Materialise placeholders (``grad`` = positions that require grad) and call ``fn``."""
    torch.manual_seed(0)
    vals = [a.make(k in grad) if isinstance(a, T) else a for k, a in enumerate(args)]
    if nonleaf0:
        vals[0] = vals[0] * 1
    return vals, quiet(fn, *vals, **kw)


def _aliases(out: torch.Tensor, src) -> bool:
    """Is ``out`` an alias of ``src``: same storage, and a write to ``out`` bumps ``src``'s version?
    (unsafe_split shares storage but not the version counter, so autograd treats it as a copy)."""
    if not isinstance(src, torch.Tensor) or _ptr(out) is None or _ptr(out) != _ptr(src):
        return False
    v = src._version
    try:
        with torch.no_grad():
            out.mul_(1)
    except RuntimeError:   # expand(): overlapping memory cannot be written
        return out._is_view()
    return src._version > v


def _multi_view(fn, args, kw) -> str | None:
    """Node name from autograd's error when output 0 of a multi-output view is modified in place."""
    _, out = _run(fn, args, kw, {0}, nonleaf0=True)
    try:
        out[0].mul_(2)
    except RuntimeError as e:
        m = re.search(r"Output \d+ of (\w+) is a view and is being modified inplace", str(e))
        return m.group(1) if m and "multiple" in str(e) else None
    return None


def probe_call(fn, args, kw) -> dict | None:
    """Saved inputs/result of one call, varying which single float input requires grad."""
    gradable = [k for k, a in enumerate(args) if isinstance(a, T) and a.kind == "f"]
    try:
        _, out = _run(fn, args, kw, set(gradable))
        if not _tensors(out):
            return None
        e = {"differentiable": any(o.requires_grad for o in _tensors(out)), "multi_view": None,
             "saves_args": {}, "saves_result": set(), "sources": {"probe"},
             # the schema tells a Tensor[] (sequence) from a fixed tuple; a probe only sees "several"
             "returns": "tuple" if isinstance(out, (tuple, list)) else "tensor"}
        vals, out = _run(fn, args, kw, set())   # no grad, so the alias check may write in place
        e["view"] = _aliases(_tensors(out)[0], vals[0])
        if e["view"] and isinstance(out, (tuple, list)):
            e["multi_view"] = _multi_view(fn, args, kw)
        for g in gradable:
            vals, out = _run(fn, args, kw, {g})
            ptrs = saved_ptrs(_tensors(out))
            inputs = {_ptr(v): k for k, v in enumerate(vals) if isinstance(v, torch.Tensor)}
            for p, k in inputs.items():
                if p in ptrs:
                    e["saves_args"].setdefault(k, set()).add(g)
            first = _tensors(out)[0]   # "the result": return 0, as in the static table
            if first.requires_grad and _ptr(first) in ptrs and _ptr(first) not in inputs:
                e["saves_result"].add(g)
    except Exception:
        return None
    return e


# Hand-written probes, read like the calls they make; ``ns.{a b c}(...)`` stands for three calls.
# X is a (3, 4) float tensor, t(...) a float tensor that may require grad, n(...) a float
# constant, i(...) indices, b(...) a mask.
CALLS = """
torch.{sigmoid tanh exp exp2 expm1 log log1p log2 log10 sqrt rsqrt sin cos tan asin acos atan sinh cosh asinh
  atanh abs relu neg reciprocal square erf erfc erfinv sign sgn floor ceil round trunc frac lgamma digamma sinc
  logit clone nan_to_num sum mean max min norm prod var std median nansum amax amin}(X)
torch.{mul div add sub maximum minimum atan2 hypot fmod remainder fmax fmin xlogy logaddexp pow max min}(X, X)
torch.{mul div add sub pow}(X, 2.0); torch.pow(2.0, X); torch.add(X, X, alpha=2); torch.sub(X, X, alpha=2)
torch.{sum mean max min norm prod var std median nansum amax amin logsumexp cumsum cumprod logcumsumexp cummax
  cummin}(X, 1)
torch.clamp(X, 0.2, 0.8); torch.clamp(X, X, X); torch.where(b(3, 4), X, X); torch.lerp(X, X, {0.5 X})
F.{relu relu6 leaky_relu elu selu celu gelu silu mish hardtanh hardswish hardsigmoid softplus sigmoid tanh
  logsigmoid softsign tanhshrink softshrink hardshrink rrelu normalize}(X)
F.{mse_loss l1_loss smooth_l1_loss huber_loss binary_cross_entropy kl_div cosine_similarity pairwise_distance
  binary_cross_entropy_with_logits cross_entropy}(X, X)
torch.{softmax log_softmax}(X, -1); F.{softmax log_softmax softmin glu}(X, -1); F.threshold(X, 0.5, 0.0)
F.{dropout alpha_dropout dropout2d feature_alpha_dropout}(t(2, 3, 4, 4), 0.5, True)
F.{max_pool2d avg_pool2d adaptive_avg_pool2d adaptive_max_pool2d}(t(1, 2, 4, 4), 2)
torch.mm(t(3, 4), t(4, 5)); torch.bmm(t(2, 3, 4), t(2, 4, 5)); torch.matmul(t(3, 4), t(4, 5))
torch.matmul(t(2, 3, 4), t(4, 5)); torch.matmul(t(4), t(4)); torch.dot(t(4), t(4)); torch.mv(X, t(4))
torch.outer(t(3), t(4)); torch.addmm(t(3, 5), t(3, 4), t(4, 5)); torch.einsum("ij,jk->ik", X, t(4, 5))
torch.baddbmm(t(2, 3, 5), t(2, 3, 4), t(2, 4, 5)); F.linear(X, t(5, 4), t(5)); F.linear(X, t(5, 4))
F.bilinear(X, t(3, 2), t(5, 4, 2), t(5)); F.layer_norm(t(2, 4), (4,), t(4), t(4))
F.group_norm(t(2, 4, 3), 2, t(4), t(4)); F.batch_norm(t(4, 3), n(3), n(3), t(3), t(3), True)
F.instance_norm(t(2, 3, 4), None, None, t(3), t(3)); F.conv1d(t(2, 3, 8), t(4, 3, 3), t(4))
F.conv2d(t(2, 3, 6, 6), t(4, 3, 3, 3), t(4)); F.conv_transpose2d(t(2, 3, 6, 6), t(3, 4, 3, 3), t(4))
F.embedding(i(2, 3, hi=6), t(6, 3)); F.cross_entropy(t(3, 5), i(3, hi=5)); F.nll_loss(t(3, 5), i(3, hi=5))
F.binary_cross_entropy(X, X, n(3, 4)); F.binary_cross_entropy_with_logits(X, X, n(3, 4), None, None, "mean", n(4))
F.prelu(t(2, 3, 4), t(3)); F.pad(t(1, 2, 4, 4), (1, 1)); F.interpolate(t(1, 2, 4, 4), scale_factor=2)
F.interpolate(t(1, 2, 4, 4), scale_factor=2, mode="bilinear"); F.scaled_dot_product_attention(X, X, X)
torch.transpose(X, 0, 1); torch.t(X); Tensor.view(X, (12,)); torch.reshape(X, (12,)); torch.select(X, 0, 0)
torch.narrow(X, 0, 0, 2); Tensor.expand(t(1, 4), (3, 4)); Tensor.expand_as(t(1, 4), n(3, 4))
torch.squeeze(t(1, 4)); torch.unsqueeze(X, 0); torch.permute(X, (1, 0)); torch.diagonal(t(4, 4))
torch.as_strided(X, (2, 2), (1, 1)); Tensor.unfold(X, 0, 2, 1); Tensor.view_as(X, n(12)); torch.ravel(X)
Tensor.reshape_as(X, n(12)); torch.flatten(X); torch.unflatten(t(12), 0, (3, 4)); torch.movedim(X, 0, 1)
torch.swapaxes(X, 0, 1); torch.detach(X); Tensor.contiguous(X); torch.real(X)
"""
MULTI_EXTRA = ("unsafe_split", "unsafe_chunk", "unsafe_split_with_sizes")   # not in the static multi list


def hand_probes() -> list:
    """(name, callable, args, kwargs) for every call in CALLS, ``{a b}`` alternatives expanded."""
    env = {"torch": torch, "F": F, "Tensor": torch.Tensor, "X": T(3, 4), "t": T, "n": lambda *s: T(*s, kind="n"),
           "i": lambda *s, hi=3: T(*s, kind="i", hi=hi), "b": lambda *s: T(*s, kind="b")}
    probes, calls = [], [c.strip() for c in re.split(r";|\n(?![^{]*\})", CALLS) if c.strip()]
    while calls:
        call = calls.pop(0)
        if m := re.search(r"\{([^}]*)\}", call):
            calls[:0] = [call[:m.start()] + alt + call[m.end():] for alt in m.group(1).split()]
            continue
        head, rest = call.split("(", 1)
        args, kw = eval(f"(lambda *a, **k: (a, k))({rest}", env)   # our own literal table, not input
        probes.append((head.split(".")[-1], eval(head, env), args, kw))
    return probes


def auto_probes(funcs, static, explicit: set) -> list:
    """Probes built from schemas, checking the static table well beyond the hand-written list: every
    ``torch.X`` builtin (or Python function of ``torch.functional``, such as ``cdist``) whose required args are
    all Tensors, and every multi-output view."""
    probes, done = [], set()
    for f in funcs:
        name, args = f.func.name.name.base, f.func.arguments
        fn = getattr(torch, name, None)
        req = [a for a in args.flat_all if a.default is None]
        if (f.func.kind().name == "functional" and name not in explicit
                and (name in static and type(fn).__name__ == "builtin_function_or_method"
                     or inspect.isfunction(fn) and fn.__module__ == "torch.functional")  # torch.cdist
                and (name, len(req)) not in done
                and all(str(a.type) == "Tensor" for a in req)):
            done.add((name, len(req)))
            probes.append((name, fn, tuple(T(4, 4) for _ in req), {}))
    for name in sorted({k for k, v in static.items() if v["multi_view"]} | set(MULTI_EXTRA)):
        for extra in ((), (2,), ([1, 3],)):   # unbind / split, chunk / split_with_sizes
            try:
                getattr(torch.Tensor, name)(torch.rand(4, 6, 4), *extra)
            except Exception:
                continue
            probes.append((name, getattr(torch.Tensor, name), (T(4, 6, 4), *extra), {}))
            break
    return probes


def empirical_ops(probes) -> tuple[dict, list]:
    """Run every probe; several probes of one name (overloads) merge by union.  Also each probe's own answer
    with the shape of its call, to be matched to the overload it ran."""
    ops, calls = {}, []
    for name, fn, args, kw in probes:
        entry = probe_call(fn, args, kw)
        if entry is not None:
            ops[name] = merge(ops.get(name), entry)
            calls.append((name, "".join("T" if isinstance(a, T) else "S" for a in args), sorted(kw), entry))
    return ops, calls


def _overload(form: dict) -> Overload:
    """A form of the table as the analysis matches it (the facts are left out)."""
    names = None if form["names"] is None else frozenset(form["names"])
    positional = None if form["names"] is None else tuple(form["names"][:len(form["kinds"])])
    return Overload(form["kinds"], form["required"], names, {}, frozenset(), positional)


def overloads_table(static_forms: dict, calls: list) -> dict:
    """Per name, each overload's saves: the schema's formula, replaced by what a probe of that call shape
    saw (the probe wins, as for whole names).  A probe that matches no schema (a function written in Python)
    is an overload of its own, of its call's shape."""
    forms = {name: [dict(f, saves_args={k: set(v) for k, v in f["saves_args"].items()},
                         saves_result=set(f["saves_result"]), probed=False) for f in fs]
             for name, fs in static_forms.items()}
    for name, kinds, keywords, entry in calls:
        hits = [f for f in forms.get(name, []) if _overload(f).accepts(tuple(kinds), dict.fromkeys(keywords), strict=True)]
        if not hits:
            hits = [{"kinds": kinds, "required": len(kinds), "names": None, "saves_args": {},
                     "saves_result": set(), "probed": False}]
            forms.setdefault(name, []).extend(hits)
        for f in hits:
            if not f["probed"]:
                f.update(saves_args={}, saves_result=set(), probed=True)
            for k, v in entry["saves_args"].items():
                f["saves_args"].setdefault(k, set()).update(v)
            f["saves_result"] |= entry["saves_result"]
    return {name: sorted(({"kinds": f["kinds"], "required": f["required"], "names": f["names"],
                           "saves_args": {str(k): sorted(v) for k, v in sorted(f["saves_args"].items())},
                           "saves_result": sorted(f["saves_result"])} for f in fs),
                         key=lambda f: (f["kinds"], f["required"], json.dumps(f["names"])))
            for name, fs in forms.items()}


def integral_results(funcs) -> list:
    """Ops whose result is an integer or bool tensor when given float tensors (``argmax``, ``eq``,
    ``nonzero``, ``.long()``): such a tensor never requires grad, whatever its inputs do.  A name counts only
    when every call shape tried that returns one tensor gives an integral one."""
    names = {f.func.name.name.base for f in funcs if f.func.kind().name == "functional"
             and not f.func.name.name.dunder_method and not f.func.name.name.base.startswith("_")}
    names |= {k for k in dir(torch.Tensor) if not k.startswith("_") and not k.endswith("_")}
    found = []
    for name in sorted(n for n in names if visible(n) or hasattr(torch.Tensor, n)):
        results = []
        for fn in (getattr(torch, name, None), getattr(torch.Tensor, name, None)):
            if not callable(fn) or isinstance(fn, type):
                continue
            for args in ((), (1,), (T(4, 4),)):
                try:
                    _, out = _run(fn, (T(4, 4), *args), {}, {0})
                except Exception:
                    continue
                if isinstance(out, torch.Tensor):
                    results.append(not (out.is_floating_point() or out.is_complex()))
        if results and all(results):
            found.append(name)
    return found


def integral_dtypes() -> list:
    """``torch.long``, ``torch.int32``, ``torch.bool``...: the dtype names whose tensors never require grad."""
    return sorted(k for k, v in vars(torch).items() if isinstance(v, torch.dtype) and not k.startswith("_")
                  and not (v.is_floating_point or v.is_complex))



# ------------------------------------------------------------------------------------- dtypes
DTYPE_INPUTS = (torch.float32, torch.float64, torch.int64, torch.int32, torch.bool)


def _of_dtype(dtype: torch.dtype, *shape) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(0, 3, shape).to(dtype)
    return (torch.rand(shape) * 0.8 + 0.1).to(dtype)


def _canonical(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_names() -> dict:
    """``torch.float`` -> ``float32``, ``torch.long`` -> ``int64``: every public dtype name, by its canonical one."""
    return {k: _canonical(v) for k, v in sorted(vars(torch).items())
            if isinstance(v, torch.dtype) and not k.startswith("_")}


def floating_dtypes() -> list:
    """The canonical names of the floating-point dtypes (``float32``, ``bfloat16``...)."""
    return sorted({_canonical(v) for v in vars(torch).values() if isinstance(v, torch.dtype) and v.is_floating_point})


def _op_names(funcs) -> list:
    names = {f.func.name.name.base for f in funcs if f.func.kind().name == "functional"
             and not f.func.name.name.dunder_method and not f.func.name.name.base.startswith("_")}
    names |= {k for k in dir(torch.Tensor) if not k.startswith("_") and not k.endswith("_")}
    return sorted(n for n in names if visible(n) or hasattr(torch.Tensor, n))


# The argument lists after the tensor ``x`` (``y``: a second tensor of its dtype, ``i``: indices, ``m``: a bool
# mask) an op is tried with; a list first (``[x, y]``) for the ops that join tensors.
DTYPE_CALLS = ("", "1", "1.5", "y", "-1", "0,1", "1,0", "2", "[x,y]", "[x,y],0", "4,4", "-1,-1", "2,8", "(2,8)",
               "0,0,2", "1,(2,2)", "0,i", "m,0", "m,y")


def _dtype_runs(name: str, forms: tuple) -> list:
    """(input dtype, input, result, form) of ``torch.name`` / ``Tensor.name`` on tensors of each dtype, in each of
    ``forms`` that a float32 tensor takes: the calls that return one tensor."""
    runs, all_forms = [], forms
    for fn in (getattr(torch, name, None), getattr(torch.Tensor, name, None)):
        if not callable(fn) or isinstance(fn, type):
            continue
        forms = all_forms
        for dtype in DTYPE_INPUTS:
            taken = []
            for form in forms:
                torch.manual_seed(0)
                x, y = _of_dtype(dtype, 4, 4), _of_dtype(dtype, 4, 4)
                names = {"x": x, "y": y, "i": torch.zeros(4, 4, dtype=torch.long), "m": torch.rand(4, 4) > 0.5}
                args = eval(f"({form},)" if form.startswith("[") else f"(x, {form})", names)
                try:
                    out = quiet(fn, *args)
                except Exception:
                    continue
                taken.append(form)
                if isinstance(out, torch.Tensor):
                    runs.append((dtype, x, out, form))
            if dtype == torch.float32:
                forms = taken  # the other dtypes are tried in the forms a float tensor takes
    return runs


def dtype_results(funcs, ops: set) -> dict:
    """How each op's result dtype follows its inputs' (``x.float()`` is float32, ``x.argmax()`` int64 whatever ``x``
    is; ``x + 1``, ``x.view(-1)`` keep ``x``'s dtype).  ``fixed``: name -> dtype, when every call tried, on tensors
    of several dtypes, returns that dtype.  ``keeps_float`` / ``keeps_int``: the names whose every call on
    floating (at least float32 and float64) / integer tensors returns its input's dtype.  ``self_when_same``: the
    fixed ones that return the very same tensor when it has that dtype already (``.float()`` of a float32
    tensor: an alias, no copy).  ``dtype_argument``: the names a positional argument may give a dtype to
    (``x.view(torch.int32)``).  Only the ops of the table (``ops``) are tried in every form: the others are
    called as methods without their own entry, whose result dtype only a fixed dtype tells."""
    fixed, keeps_float, keeps_int, same, by_argument = {}, [], [], {}, []
    for name in _op_names(funcs):
        if name in ops and _takes_dtype(name):
            by_argument.append(name)
        runs = _dtype_runs(name, DTYPE_CALLS if name in ops else DTYPE_CALLS[:4])
        if not runs:
            continue
        results = {out.dtype for _, _, out, _ in runs}
        if len(results) == 1 and len({d for d, _, _, _ in runs}) > 1:
            dtype = results.pop()
            fixed[name] = _canonical(dtype)
            fn = getattr(torch.Tensor, name, None)
            x = _of_dtype(torch.float32, 4, 4).to(dtype)
            try:
                if callable(fn) and quiet(fn, x) is x:
                    same[name] = _canonical(dtype)
            except Exception:
                pass
            continue
        floats = [(d, out) for d, _, out, _ in runs if d.is_floating_point]
        if {torch.float32, torch.float64} <= {d for d, _ in floats} and all(out.dtype == d for d, out in floats):
            keeps_float.append(name)
        # an integer tensor and a float number give a float: the integer forms are judged on integer arguments
        ints = [(d, out) for d, _, out, form in runs if not d.is_floating_point and d != torch.bool and form != "1.5"]
        if ints and all(out.dtype == d for d, out in ints):
            keeps_int.append(name)
    return {"fixed": fixed, "keeps_float": keeps_float, "keeps_int": keeps_int, "self_when_same": same,
            "dtype_argument": by_argument}


def _takes_dtype(name: str) -> bool:
    """Does ``torch.name`` / ``Tensor.name`` take a dtype as a positional argument, which then decides its result's
    dtype (``x.view(torch.int32)``, ``x.to(torch.int32)``, ``softmax(x, 0, torch.float64)``)?"""
    for fn in (getattr(torch, name, None), getattr(torch.Tensor, name, None)):
        if not callable(fn) or isinstance(fn, type):
            continue
        for rest in ((torch.int32,), (0, torch.float64), (torch.float64,)):
            try:
                out = quiet(fn, _of_dtype(torch.float32, 4, 4), *rest)
            except Exception:
                continue
            if isinstance(out, torch.Tensor) and out.dtype == rest[-1]:
                return True
    return False


def dtype_conversions() -> dict:
    """Tensor methods that convert to the dtype an argument names (``x.to(torch.float64)``: "dtype") or that
    another tensor has (``x.type_as(y)``: "tensor"), and return ``x`` itself when it has that dtype already."""
    found = {}
    for name in sorted(k for k in dir(torch.Tensor) if not k.startswith("_") and not k.endswith("_")):
        fn = getattr(torch.Tensor, name)
        if not callable(fn):
            continue
        for kind, arg in (("dtype", lambda d: d), ("tensor", lambda d: _of_dtype(d, 2))):
            ok = True
            for have, want in ((torch.float32, torch.float32), (torch.float32, torch.float64),
                               (torch.int64, torch.int64), (torch.float64, torch.int64)):
                x = _of_dtype(have, 4, 4)
                try:
                    out = quiet(fn, x, arg(want))
                except Exception:
                    ok = False
                    break
                if not isinstance(out, torch.Tensor) or out.dtype != want or (out is x) != (have == want):
                    ok = False
                    break
            if ok:
                found.setdefault(name, []).append(kind)
    return found


# Argument lists a factory may take; each factory is called with every one it accepts.
FACTORY_CALLS = ((2, 3), ((2, 3),), (5,), (5.0,), (0, 5, (2,)), (0, 1, 5), (0.0, 1.0, (2,)), ((2,), 1),
                 ((2,), 1.0), ([1, 2],), ([1.0, 2.0],), (True,))


def factory_dtypes() -> dict:
    """The dtype of what each factory makes, when the call's arguments do not decide it: "default" (follows
    ``torch.get_default_dtype()``: ``randn``, ``zeros``), "like" (its tensor argument's: ``zeros_like``), or a
    fixed dtype (``randint``: int64).  Factories whose result depends on their data (``arange(5)`` is int64,
    ``arange(5.0)`` float32; ``torch.tensor``, ``full``) are left out."""
    found = {}
    default = torch.get_default_dtype()
    for name in sorted(FACTORIES):
        fn = getattr(torch, name, None)
        if not callable(fn):
            continue
        kinds = set()
        for args in FACTORY_CALLS:
            results = []
            for dflt in (torch.float32, torch.float64):
                torch.set_default_dtype(dflt)
                try:
                    results.append(quiet(fn, *args).dtype)
                except Exception:
                    results.append(None)
                finally:
                    torch.set_default_dtype(default)
            if None in results:
                continue
            kinds.add("default" if results == [torch.float32, torch.float64] else
                      _canonical(results[0]) if results[0] == results[1] else "mixed")
        like = set()
        for dtype in (torch.float32, torch.float64, torch.int64):
            x = _of_dtype(dtype, 2, 3)
            for extra in ((), (5,)):
                try:
                    out = quiet(fn, x, *extra)
                except Exception:
                    continue
                like.add(out.dtype == dtype)
        if like and not kinds:
            kinds.add("like" if all(like) else "mixed")
        if len(kinds) == 1 and "mixed" not in kinds:
            found[name] = kinds.pop()
    return found


def tensor_constructors() -> list:
    """``torch.Tensor(data)``, ``torch.FloatTensor(data)``, ``torch.LongTensor(data)``...: the legacy classes that
    build a new tensor from data, copying values out of any tensors in it (no graph), as ``torch.tensor`` does."""
    found = []
    for name in sorted(k for k in dir(torch) if k.endswith("Tensor") and isinstance(getattr(torch, k), type)):
        try:
            made = getattr(torch, name)([1.0, 2.0])
        except Exception:
            continue
        if isinstance(made, torch.Tensor) and made.grad_fn is None and not made.requires_grad:
            found.append(name)
    return found


def module_wrappers() -> list:
    """Functions of ``torch.nn.utils`` that return the very module they are given (``weight_norm(layer)``,
    ``spectral_norm(layer)``): the layer keeps its class, so a Sequential built from it still runs it."""
    import importlib
    found = []
    for owner in ("torch.nn.utils", "torch.nn.utils.parametrizations"):
        module = importlib.import_module(owner)
        for name in sorted(k for k in dir(module) if not k.startswith("_")):
            fn = getattr(module, name)
            if not callable(fn) or isinstance(fn, type) or inspect.ismodule(fn):
                continue
            for layer in (nn.Linear(3, 3), nn.Conv2d(2, 2, 1)):
                try:
                    if quiet(fn, layer) is layer:
                        found.append(f"{owner}.{name}")
                        break
                except Exception:
                    continue
    return sorted(set(found))


def python_names() -> dict:
    """The public names of ``torch.Tensor`` (methods and attributes: ``add``, ``shape``, ``T``), of ``torch``, of
    ``torch.nn.functional`` and of ``torch.nn.Module``: what a name in gradguard's tables can be checked against
    without importing torch.  Modules are left out: which submodules ``dir(torch)`` lists depends on what has been
    imported."""
    return {owner: sorted(k for k in dir(obj) if not k.startswith("_") and not inspect.ismodule(getattr(obj, k)))
            for owner, obj in (("Tensor", torch.Tensor), ("torch", torch), ("torch.nn.functional", F),
                               ("torch.nn.Module", nn.Module))}


def attribute_views() -> dict:
    """The ``Tensor`` attributes (not methods) whose value shares the tensor's memory: "view" when autograd tracks
    it as a view of the tensor (``x.T``, ``x.mH``, ``x.real`` of a complex ``x``), "detached" when it does not
    (``x.data``).  Read off a float and a complex tensor that require grad."""
    found: dict[str, str] = {}
    for dtype in (torch.float32, torch.complex64):
        x = torch.rand(3, 3, dtype=dtype).requires_grad_() * 1
        for name in sorted(k for k in dir(torch.Tensor) if not k.startswith("_")):
            try:
                value = quiet(getattr, x, name)
            except Exception:
                continue
            if (isinstance(value, torch.Tensor) and value is not x
                    and value.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()):
                found[name] = "view" if value._is_view() or found.get(name) == "view" else "detached"
    return dict(sorted(found.items()))


def inplace_result_saved(inplace: dict, kwarg_functions: list) -> list:
    """Out-of-place names whose in-place form saves its *result* for backward: ``leaky_relu`` (``F.leaky_relu_``,
    ``F.leaky_relu(x, inplace=True)``, ``nn.LeakyReLU(inplace=True)``) does although ``leaky_relu`` saves its
    input.  Read off torch: the in-place call, on a tensor with a grad_fn, builds a graph that saves the written
    memory itself (an in-place op whose formula reads the old ``self`` saves a copy of it instead)."""
    def saves_result(call) -> bool | None:
        torch.manual_seed(0)
        x = (torch.rand(4, 4) * 0.8 + 0.1).requires_grad_().clone()   # CloneBackward saves nothing
        try:
            y = quiet(call, x)
        except Exception:
            return None
        if not isinstance(y, torch.Tensor) or y.grad_fn is None or _ptr(y) != _ptr(x):
            return None
        return _ptr(x) in saved_ptrs([y])

    found = set()
    for name, twin in inplace.items():
        if twin is None:
            continue
        for fn in (getattr(torch, name, None), getattr(F, name, None), getattr(torch.Tensor, name, None)):
            answers = [saves_result(lambda x, a=args: fn(x, *a)) for args in ((), (0.5,)) if fn is not None]
            answer = next((a for a in answers if a is not None), None)
            if answer is not None:
                if answer:
                    found.add(twin)
                break
    for name in kwarg_functions:
        if saves_result(lambda x: getattr(F, name)(x, inplace=True)):
            found.add(name)
    return sorted(found)


def inplace_sign_refused(kwarg_functions: list) -> dict:
    """In-place activations whose backward refuses a negative scalar parameter: ``F.leaky_relu_(x, -2)`` saves its
    result and recovers the input's sign from it, impossible with a negative slope, so backward raises.  Read off
    torch: the call with ``inplace=True`` and that one parameter at -0.5 (a ``training`` flag either way) makes
    backward raise, at +0.5 it does not.  Per function: the parameter, its position in the ``F`` function (input
    first) and in each ``nn`` class built on it (``self`` not counted), and the start of torch's message."""
    def error(fn, param: str, value: float, training: bool | None) -> str | None:
        torch.manual_seed(0)
        x = (torch.rand(4) - 0.5).requires_grad_()
        kw = {param: value, "inplace": True, **({} if training is None else {"training": training})}
        try:
            y = quiet(fn, x.clone(), **kw)
        except Exception:  # the call itself refuses the value (a dropout probability, rrelu's bounds)
            return None
        try:
            y.sum().backward()
        except RuntimeError as e:
            return str(e).split(". ")[0]
        return None

    classes = module_classes()
    found = {}
    for name in kwarg_functions:
        fn = getattr(F, name)
        params = inspect.signature(fn).parameters
        modes = (True, False) if "training" in params else (None,)
        for param, spec in params.items():
            if param in ("input", "inplace", "training") or not isinstance(spec.default, float):
                continue
            raised = [error(fn, param, -0.5, mode) for mode in modes]
            if all(raised) and len(set(raised)) == 1 and not any(error(fn, param, 0.5, mode) for mode in modes):
                modules = {}
                for cls_name, cls in classes.items():
                    init = list(inspect.signature(cls.__init__).parameters)[1:]
                    if functional_name(cls_name) == name and param in init:
                        modules[cls_name] = init.index(param)
                found[name] = {"param": param, "position": list(params).index(param), "modules": modules,
                               "error": raised[0]}
    return dict(sorted(found.items()))


def autograd_function_bases() -> list:
    """``torch.autograd.Function`` and the other public classes deriving from it, by every public path: a class
    of the user's deriving from one is a custom Function (``Foo.apply`` runs its ``forward`` under no_grad)."""
    import importlib
    found = []
    for owner in ("torch.autograd", "torch.autograd.function"):
        module = importlib.import_module(owner)
        for name in sorted(k for k in dir(module) if not k.startswith("_")):
            cls = getattr(module, name)
            if isinstance(cls, type) and issubclass(cls, torch.autograd.Function):
                found.append(f"{owner}.{name}")
    return sorted(set(found))


def backward_hook_registrations() -> list:
    """``nn.Module`` methods whose hook makes torch run the module's output through a ``BackwardHookFunction``:
    that output is then a view made inside a custom Function, which torch refuses to let anyone write in
    place (``register_full_backward_hook``; the legacy ``register_backward_hook`` does not)."""
    found = []
    for name in sorted(k for k in dir(nn.Module) if k.startswith("register_") and "hook" in k):
        layer = nn.Linear(3, 3)
        try:
            quiet(getattr(layer, name), lambda *args, **kwargs: None)
            out = quiet(layer, torch.randn(2, 3))
        except Exception:
            continue
        try:
            out.add_(1)
        except RuntimeError as error:
            if "BackwardHookFunction" in str(error):
                found.append(name)
    return found


# ----------------------------------------------------------------------------------- modules
MODULE_SPECS = {   # class name: (constructor args, input)
    "Linear": ((4, 3), T(2, 4)), "Conv1d": ((3, 4, 3), T(2, 3, 8)), "Conv2d": ((3, 4, 3), T(2, 3, 6, 6)),
    "ConvTranspose2d": ((3, 4, 3), T(2, 3, 6, 6)), "BatchNorm1d": ((3,), T(4, 3)),
    "BatchNorm2d": ((3,), T(2, 3, 4, 4)), "LayerNorm": ((4,), T(2, 3, 4)), "GroupNorm": ((1, 3), T(2, 3, 4, 4)),
    "InstanceNorm2d": ((3,), T(2, 3, 4, 4)), "Embedding": ((6, 3), T(2, 3, kind="i", hi=6)),
    "Softmax": ((-1,), T(2, 4)), "LogSoftmax": ((-1,), T(2, 4)), "Softmin": ((-1,), T(2, 4)),
    "Threshold": ((0.5, 0.0), T(2, 4)), "MaxPool2d": ((2,), T(1, 2, 4, 4)), "AvgPool2d": ((2,), T(1, 2, 4, 4)),
    "AdaptiveAvgPool2d": ((2,), T(1, 2, 4, 4)), "MultiheadAttention": ((4, 2), T(3, 2, 4)),
    "LSTM": ((4, 3), T(3, 2, 4)), "GRU": ((4, 3), T(3, 2, 4)), "RNN": ((4, 3), T(3, 2, 4)),
    "RNNCell": ((4, 3), T(2, 4)), "LSTMCell": ((4, 3), T(2, 4)), "GRUCell": ((4, 3), T(2, 4)),
    "Conv3d": ((3, 4, 3), T(1, 3, 4, 4, 4)), "ConvTranspose1d": ((3, 4, 3), T(2, 3, 8)),
    "BatchNorm3d": ((3,), T(2, 3, 2, 2, 2)), "InstanceNorm1d": ((3,), T(2, 3, 4)),
    "Bilinear": ((4, 4, 3), T(2, 4)), "TransformerEncoderLayer": ((4, 2, 8, 0.0), T(3, 2, 4)),
    "PReLU": ((), T(2, 4)),
}
# classes constructible without arguments that are containers, abstract, or too big for a probe
MODULE_SKIP = re.compile(r"(Module|Container|Sequential|Module(List|Dict)|Parameter(List|Dict)|Transformer.*|Lazy.*)")


def module_classes() -> dict:
    return {k: c for k, c in vars(nn.modules).items()
            if isinstance(c, type) and issubclass(c, nn.Module) and not k.startswith("_")}


def probe_module(make, inp: T) -> dict:
    """Is the input / output / a parameter saved when the input or the parameters require grad?"""
    torch.manual_seed(0)
    m = quiet(make)
    call = (lambda x: m(x, x, x)) if isinstance(m, nn.MultiheadAttention) else m
    params = list(m.parameters())
    res = {"saves_input": set(), "saves_output": set(), "saves_params": set(), "has_params": bool(params),
           "returns": "tensor"}
    for cond in ("input", "params"):
        if (cond == "input" and inp.kind != "f") or (cond == "params" and not params):
            continue
        for p in params:
            p.requires_grad_(cond == "params")
        x = _run(lambda v: v, (inp,), {}, {0} if cond == "input" else set())[1]
        out = quiet(call, x)
        if isinstance(out, (tuple, list)):
            res["returns"] = "tuple"  # LSTM: (output, (h, c)); MultiheadAttention: (output, weights)
        outs = _tensors(out)
        ptrs, pp = saved_ptrs(outs), {_ptr(p) for p in params}
        for field, hit in (("saves_input", _ptr(x) in ptrs), ("saves_params", bool(pp & ptrs)),
                           ("saves_output", any(o.requires_grad and _ptr(o) in ptrs - pp - {_ptr(x)} for o in outs))):
            if hit:
                res[field].add(cond)
    return res


# Constructor options that add parameters (more layers, a reverse direction, a projection, an affine transform):
# tried one at a time so that every parameter name the class can have is seen.
PARAM_OPTIONS = ({"num_layers": 2}, {"bidirectional": True}, {"proj_size": 1}, {"affine": True},
                 {"elementwise_affine": True}, {"bias": True}, {"num_layers": 2, "bidirectional": True, "proj_size": 1})


def param_names(cls: str, make) -> list[str]:
    """The names of the class's own parameters (``weight``, ``bias_hh_l0``), each run of digits written ``{n}``
    (``bias_hh_l{n}``): one name per layer or direction index the module is built with."""
    names = {n for n, _ in quiet(make).named_parameters(recurse=False)}
    ctor = module_classes()[cls]
    args = next((a for k, (a, _) in MODULE_SPECS.items() if k == cls), ())
    for options in PARAM_OPTIONS:
        try:
            names |= {n for n, _ in quiet(ctor, *args, **options).named_parameters(recurse=False)}
        except Exception:  # the class does not take that option (or not with these sizes)
            continue
    return sorted({re.sub(r"\d+", "{n}", n) for n in names})


def functional_name(cls: str) -> str | None:
    """Matching ``F`` function: LeakyReLU -> leaky_relu, BatchNorm2d -> batch_norm, Identity -> None."""
    index = {k.replace("_", ""): k for k in dir(F) if not k.startswith("_") and not k.endswith("_")
             and callable(getattr(F, k)) and not isinstance(getattr(F, k), type)}
    key = cls.lower()
    return index.get(key) or index.get(re.sub(r"\dd$", "", key))


def modules_table(kwarg_mods: set) -> dict:
    """Probe the listed modules, plus every module constructible without arguments (activations...)."""
    classes = module_classes()
    specs = {k: (lambda c=classes[k], a=a: c(*a), inp) for k, (a, inp) in MODULE_SPECS.items()}
    for k, c in sorted(classes.items()):
        if k not in specs and not MODULE_SKIP.fullmatch(k):
            specs[k] = (c, T(2, 3, 4, 4))
    table = {}
    for k, (make, inp) in specs.items():
        try:
            res = probe_module(make, inp)
        except Exception:   # needs constructor arguments or a second input (losses...)
            continue
        res.update(functional=functional_name(k), inplace_kwarg=k in kwarg_mods, param_names=param_names(k, make),
                   # isinstance(m, nn.Hardtanh) holds for an nn.ReLU6: its torch classes, itself first
                   bases=[b.__name__ for b in classes[k].__mro__ if b.__name__ in classes and b is not nn.Module])
        table[k] = {f: sorted(v) if isinstance(v, set) else v for f, v in res.items()}
    return table


# Argument lists a loss may take, tried in order: (prediction, target), class indices as the target, a third
# argument of labels or of variances.  The first argument is the one that requires grad.
LOSS_INPUTS = (
    (T(2, 3), T(2, 3, kind="n")),
    (T(2, 3), T(2, kind="i")),
    (T(2, 3), T(2, 3, kind="n"), T(2, kind="n")),
    (T(2, 3), T(2, 3, kind="n"), T(2, 3, kind="n")),
)


def probe_loss(cls) -> dict | None:
    """A loss module (two or three inputs, no parameters): which of its inputs its backward saves, found by
    calling it on the first argument list it accepts."""
    for inputs in LOSS_INPUTS:
        torch.manual_seed(0)
        values = [t.make(k == 0) for k, t in enumerate(inputs)]
        values[0] = values[0] * 1  # a non-leaf, as a network's output is
        try:
            out = quiet(quiet(cls), *values)
        except Exception:
            continue
        outs = _tensors(out)
        if not outs or not outs[0].requires_grad:
            continue
        ptrs = saved_ptrs(outs)
        return {"saves_input": ["input"] if any(_ptr(v) in ptrs for v in values) else [], "saves_params": [],
                "saves_output": ["input"] if any(_ptr(o) in ptrs for o in outs) else [], "has_params": False,
                "returns": "tensor"}
    return None


def loss_modules_table() -> dict:
    """Every loss module torch has (``nn.BCELoss``, ``nn.CrossEntropyLoss``...) that a probe can call: none has
    parameters, so its output requires grad exactly when its prediction does."""
    table = {}
    for name, cls in sorted(module_classes().items()):
        if not issubclass(cls, nn.modules.loss._Loss) or name.startswith("_"):
            continue
        entry = probe_loss(cls)
        if entry is not None:
            table[name] = {**entry, "functional": None, "inplace_kwarg": False, "param_names": [],
                           "bases": [b.__name__ for b in cls.__mro__ if b.__name__ in module_classes()
                                     and b is not nn.Module and not b.__name__.startswith("_")]}
    return table


def inplace_kwarg() -> dict:
    """``F`` functions and ``nn`` module classes whose signature has an ``inplace`` parameter."""
    def has(obj):
        try:
            return "inplace" in inspect.signature(obj).parameters
        except (TypeError, ValueError):
            return False
    return {"functions": sorted(k for k in dir(F) if not k.startswith("_") and callable(getattr(F, k))
                                and has(getattr(F, k))),
            "modules": sorted(k for k, c in module_classes().items() if has(c.__init__))}


# ------------------------------------------------------------------------------------- build
def build(verbose: bool = False) -> dict:
    """The whole table as a json-ready dict (probe wins over static where both exist)."""
    by_schema, funcs = load_static()
    static, static_forms = static_ops(by_schema, funcs)
    hand = hand_probes()
    probes = hand + auto_probes(funcs, static, {p[0] for p in hand})
    probed, calls = empirical_ops(probes)
    forms = overloads_table(static_forms, calls)
    params = tensor_params(funcs)
    ops, disagree = {}, []
    for name in sorted(set(static) | set(probed)):
        s, e = static.get(name), probed.get(name)
        if s and e:
            disagree += [(name, f, s[f], e[f]) for f in FIELDS if s[f] != e[f]]
        entry = e or s
        ops[name] = {"saves_args": {str(k): sorted(v) for k, v in entry["saves_args"].items()},
                     "saves_result": sorted(entry["saves_result"]), "view": entry["view"],
                     "multi_view": entry["multi_view"], "differentiable": entry["differentiable"],
                     "returns": (s or {}).get("returns") or entry.get("returns", "tensor"),
                     "tuple_saves_args": {str(k): sorted(v) for k, v in (s or {}).get("tuple_saves_args", {}).items()}
                     if (s or {}).get("tuple_overload") else None,
                     "sources": sorted((s or {}).get("sources", set()) | (e or {}).get("sources", set())),
                     "params": dict(sorted((params.get(name) or python_params(name)).items())),
                     "overloads": forms.get(name, [])}
    inplace, dropped = inplace_names(funcs)
    kwarg = inplace_kwarg()
    table = {"format": FORMAT, "torch_version": torch.__version__, "ops": ops, "inplace": inplace,
             "inplace_kwarg": kwarg, "modules": {**loss_modules_table(), **modules_table(set(kwarg["modules"]))},
             "integral_results": integral_results(funcs), "integral_dtypes": integral_dtypes(),
             "module_wrappers": module_wrappers(), "tensor_constructors": tensor_constructors(),
             "autograd_function_bases": autograd_function_bases(),
             "backward_hook_registrations": backward_hook_registrations(), "python_names": python_names(),
             "attribute_views": attribute_views(),
             "inplace_result_saved": inplace_result_saved(inplace, kwarg["functions"]),
             "inplace_sign_refused": inplace_sign_refused(kwarg["functions"]),
             "dtypes": {"names": dtype_names(), "floating": floating_dtypes(), "default": _canonical(torch.get_default_dtype()),
                        "results": dtype_results(funcs, set(ops)), "conversions": dtype_conversions(),
                        "factories": factory_dtypes()}}
    if verbose:
        report(table, disagree, dropped, len(probes))
    return json.loads(json.dumps(table, sort_keys=True))


def report(table, disagree, dropped, nprobes):
    """Print the numbers a reviewer wants, and every static/empirical disagreement."""
    ops, kw = table["ops"].values(), table["inplace_kwarg"]
    count = {"save an input": sum(bool(o["saves_args"]) for o in ops), "probed": sum("probe" in o["sources"] for o in ops),
             "save the result": sum(bool(o["saves_result"]) for o in ops), "views": sum(o["view"] for o in ops),
             "save nothing": sum(not o["saves_args"] and not o["saves_result"] for o in ops)}
    print(f"torch {table['torch_version']}: {len(ops)} ops from {nprobes} probes + static; {count}")
    print("multi-view:", {k: o["multi_view"] for k, o in table["ops"].items() if o["multi_view"]})
    print(f"in-place names: {len(table['inplace'])} (schema writes self, no version bump, dropped: {dropped})")
    print(f"inplace= functions ({len(kw['functions'])}): {kw['functions']}\n"
          f"inplace= modules ({len(kw['modules'])}): {kw['modules']}\nmodules probed: {len(table['modules'])}")
    print(f"{len(disagree)} disagreements, static -> probe (probe kept):")
    fmt = lambda v: {k: sorted(x) for k, x in sorted(v.items())} if isinstance(v, dict) else (  # noqa: E731
        sorted(v) if isinstance(v, set) else v)
    for name, f, s, e in disagree:
        print(f"  {name}.{f}: {fmt(s)} -> {fmt(e)}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if the shipped json is out of date")
    ap.add_argument("--output", type=Path, default=OUT)
    opts = ap.parse_args(argv)
    start = time.perf_counter()
    text = json.dumps(build(verbose=True), sort_keys=True, indent=1) + "\n"
    ok = True
    if opts.check:
        ok = opts.output.exists() and opts.output.read_text() == text
        print(f"{opts.output}: {'up to date' if ok else 'OUT OF DATE, rerun without --check'}")
        if not ok and opts.output.exists():
            print(f"(shipped table is for torch {json.loads(opts.output.read_text())['torch_version']})")
    else:
        opts.output.write_text(text)
        print(f"wrote {opts.output}")
    print(f"took {time.perf_counter() - start:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
