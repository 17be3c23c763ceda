"""Tensor dtypes, where the code makes them known (facts: ``torch_ops.json``'s ``dtypes``, from the installed torch).

Two uses: a conversion to the dtype a tensor already has (``x.float()`` of a float32 ``x``, ``x.to(torch.float32)``,
``x.type_as(y)``) returns ``x`` itself, so a write through the result is a write to ``x``; and an integer or bool
tensor never requires grad.  A dtype is known only from what fixes it (a factory, a ``dtype=``, a conversion, an
op whose result dtype torch fixes or keeps, a torch layer's parameters); anything else is None, which claims
nothing.  Floating dtypes of a file are known only when nothing in it may change them behind the analysis's back
(see ``file_default_dtype``).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re

from ..knowledge import TorchKnowledge
from ..statements import every_node, syntax_fact
from .values import INT, Const, ModuleValue, Tensor, Value

# Names whose mere mention makes a file's floating dtypes unknown: a default dtype set at run time, and mixed
# precision (under autocast a layer's output is float16/bfloat16 whatever its parameters are).
_DTYPE_SWITCHES = frozenset({"set_default_dtype", "set_default_tensor_type", "autocast", "set_autocast_enabled"})
# `.to(...)`/`.type(...)` arguments that name no dtype: a device (`"cuda"`, `torch.device(...)`, `x.device`, `dev`)
_DEVICE_WORDS = ("device", "dev", "cuda", "cpu", "gpu")


def _identifier(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _identifier(node.func)
    return None


def _names_no_dtype(arg: ast.expr, default_names: frozenset[str]) -> bool:
    """A `.to()` argument that is a device, or the default dtype itself (a no-op on a module of that dtype)."""
    if isinstance(arg, ast.Constant):
        return isinstance(arg.value, (str, bool)) or arg.value is None
    name = _identifier(arg)
    if name is None:
        return False
    if isinstance(arg, ast.Attribute) and name in default_names:  # `torch.float32`
        return True
    return any(word in name.lower() for word in _DEVICE_WORDS)


def file_default_dtype(tree: ast.AST, knowledge: TorchKnowledge, text: str | None = None,
                       lines: list[str] | None = None) -> str | None:
    """The dtype a floating tensor of this file gets when nothing names another (torch's default), or None when
    the file may change it or its layers': it switches the default dtype or uses autocast, converts something
    with ``.half()``/``.double()``/``.bfloat16()`` (a module, maybe), or ``.to()``/``.type()`` with an argument
    that may be a dtype other than the default (``.to(device)`` is not).

    ``text``: the source of ``tree``; when its words show that none of these can be there, the tree is not
    walked (most files: the walk cost as much as a tenth of the analysis).  ``lines``: the lines of ``tree`` (a
    module); each top-level statement's answer is then kept by its text (``_SWITCHING``), since the editor asks
    again at every keystroke and only the edited statements changed."""
    default = knowledge.default_dtype
    if default is None:
        return None
    default_names = frozenset(k for k, v in knowledge.dtype_names.items() if v == default)
    converting = frozenset(n for n, d in knowledge.self_when_same.items()
                           if d in knowledge.floating_dtypes and d != default)
    if text is not None and not _may_change_dtype(converting.union(knowledge.dtype_conversions)).search(text):
        return default
    asked = (default_names, converting, frozenset(knowledge.dtype_conversions))
    if lines is None or not isinstance(tree, ast.Module):
        # kept on the tree with what was asked: a project module is asked by each file that follows a call into it
        switches = syntax_fact(tree, "_gradguard_switches", _switches, tree, knowledge, default_names, converting,
                               given=asked)
        return None if switches else default
    if len(_SWITCHING) > 8192:
        _SWITCHING.clear()
    for stmt in tree.body:
        # the statement's lines and columns name its text (two statements can share a line)
        first = min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", ()))])
        key = ("\n".join(lines[first - 1 : stmt.end_lineno]), stmt.col_offset, stmt.end_col_offset, asked)
        switches = _SWITCHING.get(key)
        if switches is None:
            switches = _SWITCHING[key] = _switches(stmt, knowledge, default_names, converting)
        if switches:
            return None
    return default


# Whether a top-level statement may change the file's dtypes (``_switches``), by its text and what was asked
# (emptied with the engine's other memos of texts, ``engine.forget_texts``, after each file of a batch).
_SWITCHING: dict[tuple, bool] = {}


def forget_statements() -> None:
    _SWITCHING.clear()


def _switches(tree: ast.AST, knowledge: TorchKnowledge, default_names: frozenset[str],
              converting: frozenset[str]) -> bool:
    for node in every_node(tree):
        if _identifier(node) in _DTYPE_SWITCHES if isinstance(node, (ast.Name, ast.Attribute)) else False:
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            if attr in converting:
                return True
            if attr in knowledge.dtype_conversions and attr != "type_as":
                given = [*node.args, *(k.value for k in node.keywords if k.arg in ("dtype", "device", "other"))]
                if not all(_names_no_dtype(a, default_names) for a in given):
                    return True
    return False


@functools.lru_cache(maxsize=8)
def _may_change_dtype(methods: frozenset[str]) -> re.Pattern[str]:
    """What ``file_default_dtype`` looks for, as words of the source: a dtype switch anywhere, or one of
    ``methods`` after a dot (spaces, line continuations and comments may come between).  A non-ASCII source
    always matches: Python reads identifiers NFKC-normalised, so a word of the tree may be spelt otherwise."""
    attrs = "|".join(sorted(map(re.escape, methods), key=len, reverse=True))
    return re.compile(rf"[^\x00-\x7f]|{'|'.join(sorted(_DTYPE_SWITCHES))}|\.(?:[ \t\f\r\n\\]|#[^\n]*\n)*(?:{attrs})\b")


def forget_dtypes(value: Value) -> None:
    """A module (and what it holds) whose construction the analysis did not see run as the program runs it
    (``self`` of a method analysed alone, a fresh copy): its tensors' and layers' dtypes are not known (the
    program may convert it).  Changed in place, aliasing kept."""
    seen: set[int] = set()
    todo: list[object] = [value]
    kinds = _FORGET_KINDS
    while todo:
        item = todo.pop()
        how = kinds.get(type(item))
        if how is None:
            how = kinds[type(item)] = _forget_kind(type(item))
        if how is _LEAF or id(item) in seen:
            continue
        seen.add(id(item))
        if how is list:
            todo.extend(item)
        elif how is dict:
            todo.extend(item.values())
        else:
            names, typed = how
            if typed:
                item.dtype = None
            todo.extend(getattr(item, name) for name in names)


_LEAF = object()  # ``forget_dtypes`` has nothing to look at inside
_FORGET_KINDS: dict[type, object] = {}  # type -> _LEAF, list, dict, or (its dataclass fields' names, has a dtype)


def _forget_kind(kind: type) -> object:
    """How ``forget_dtypes`` walks a value of this type, worked out once per type (the walk visits millions)."""
    if issubclass(kind, (ast.AST, str, int, float, frozenset, type(None))):
        return _LEAF
    if issubclass(kind, (list, tuple)):
        return list
    if issubclass(kind, dict):
        return dict
    if dataclasses.is_dataclass(kind):
        return tuple(f.name for f in dataclasses.fields(kind)), issubclass(kind, (Tensor, ModuleValue))
    return _LEAF


class DtypesMixin:
    """The interpreter's reading of dtypes (needs ``self.k``, ``self.ctx``, ``self.qual``)."""

    def named_dtype(self, expr: ast.expr | None) -> str | None:
        """``torch.float32``, ``torch.long``: the canonical name of the dtype the expression names, or None."""
        if not isinstance(expr, (ast.Attribute, ast.Name)):
            return None
        q = self.qual(expr)
        if q and q.startswith("torch.") and q.count(".") == 1:
            return self.k.dtype_names.get(q[len("torch."):])
        return None

    def default_dtype(self) -> str | None:
        return getattr(self.ctx, "default_dtype", None)

    def keyword_dtype(self, node: ast.AST) -> tuple[bool, str | None]:
        """Does the call pass ``dtype=``, and which dtype (None: not known)?"""
        for kw in getattr(node, "keywords", ()):
            if kw.arg == "dtype":
                return True, self.named_dtype(kw.value)
        return False, None

    def factory_dtype(self, name: str, node: ast.Call, args: list[Value]) -> str | None:
        """What ``torch.<name>(...)`` makes: its ``dtype=``, else what the factory's fact says."""
        given, dtype = self.keyword_dtype(node)
        if given:
            return dtype
        kind = self.k.factory_dtypes.get(name)
        if kind == "default":
            return self.default_dtype()
        if kind == "like":
            return args[0].dtype if args and isinstance(args[0], Tensor) else None
        return kind

    def op_dtype(self, name: str, args: list[Value], node: ast.AST) -> str | None:
        """The dtype of an op's result: fixed by the op (``argmax``, ``eq``), or its tensor inputs' one dtype for an
        op that keeps it, with numbers beside them that cannot change it.  None when an argument names a dtype."""
        given, dtype = self.keyword_dtype(node)
        if given:
            return dtype
        if any(self.named_dtype(a) is not None for a in getattr(node, "args", ())):
            return None  # `x.view(torch.int32)`, `x.sum(0, torch.float64)`
        if name in self.k.fixed_dtypes:
            return self.k.fixed_dtypes[name]
        tensors = [a for a in args if isinstance(a, Tensor)]
        dtypes = {t.dtype for t in tensors}
        if not tensors or len(dtypes) != 1:
            return None
        dtype = dtypes.pop()
        if dtype is None:
            return None
        floating = dtype in self.k.floating_dtypes
        integer = self.k.is_integral(dtype) and self.k.fixed_dtypes.get("bool") != dtype  # bool + 1 is int64
        if name not in (self.k.keeps_float if floating else self.k.keeps_int if integer else ()):
            return None
        info = self.k.op(name)
        shapes_only = info is not None and info.view and name not in self.k.dtype_argument
        for a in args:
            if isinstance(a, Tensor) or a is INT:
                continue
            if isinstance(a, Const):
                if isinstance(a.value, complex) or (not floating and isinstance(a.value, float)):
                    return None  # a float number makes an integer tensor's result float, a complex one complex
            elif not shapes_only:  # `x.reshape(*x.shape[:-1], -1, 2)`: sizes; elsewhere it may be a number
                return None
        return dtype

    def same_dtype_conversion(self, tensor: Tensor, name: str, node: ast.Call, positional: list[Value],
                              kwargs: dict[str, Value]) -> bool:
        """``x.float()`` of a float32 ``x``, ``x.to(torch.float32)``, ``x.type_as(y)`` with ``y`` of ``x``'s dtype:
        torch returns ``x`` itself (no copy)."""
        if tensor.dtype is None:
            return False
        if name in self.k.self_when_same:
            return not node.args and not node.keywords and self.k.self_when_same[name] == tensor.dtype
        kinds = self.k.dtype_conversions.get(name, frozenset())
        if not kinds or len(node.args) + len(node.keywords) != 1:
            return False
        arg = node.args[0] if node.args else node.keywords[0].value
        keyword = node.keywords[0].arg if node.keywords else None
        if "dtype" in kinds and keyword in (None, "dtype") and self.named_dtype(arg) == tensor.dtype:
            return True
        if "tensor" in kinds and keyword in (None, "other") and not self.named_dtype(arg):
            other = positional[0] if positional else kwargs.get("other")
            return isinstance(other, Tensor) and other.dtype == tensor.dtype
        return False

    def conversion_dtype(self, tensor: Tensor, name: str, node: ast.Call) -> str | None:
        """The dtype a conversion gives (``.double()``, ``.to(torch.long)``), when known."""
        if name in self.k.fixed_dtypes and not node.args and not node.keywords:
            return self.k.fixed_dtypes[name]
        if name in self.k.dtype_conversions:
            given, dtype = self.keyword_dtype(node)
            if given:
                return dtype
            if len(node.args) == 1 and not node.keywords:
                return self.named_dtype(node.args[0])
        return None
