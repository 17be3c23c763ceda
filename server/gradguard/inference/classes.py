"""The file's own classes: every class, not only ``nn.Module`` subclasses.

A plain ``class Trainer:`` that holds a model and an optimizer, a loss object called through ``__call__``
and a subclass of ``nn.Linear`` are all ordinary ways to reach the same bugs, so each class is recorded
with its in-file bases (for method lookup) and the torch class it ultimately derives from, if any.
Plain data: running ``__init__`` and methods is the interpreter's job.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace
from typing import ClassVar

from .imports import normalize, qualified_name

@dataclass
class ClassInfo:
    """One class of the file.

    ``torch_base``: the ``torch.nn`` class it derives from, directly or through other classes of the file
    (``"Module"`` for a plain ``nn.Module`` subclass, ``"Linear"`` for ``class MyLinear(nn.Linear)``), else None.
    ``bases``: the names of its bases that are classes of this file, in order (the method resolution order
    is approximated depth first, which is right for single inheritance).
    """

    node: ast.ClassDef
    bases: list[str] = field(default_factory=list)
    torch_base: str | None = None
    autograd_function: bool = False  # derives from ``torch.autograd.Function``: ``Foo.apply`` runs its forward
    module_path: str | None = None  # the project module it is defined in, when not the analysed file
    # A ``@dataclass`` whose ``__init__`` the decorator writes: it binds each field from the arguments, by
    # position then by name, else from the field's default.
    dataclass_init: bool = False
    fields: list[tuple[str, "ast.expr | None"]] = field(default_factory=list)  # a dataclass's own, see _own_fields
    # Bases imported from elsewhere (``class LSTM(RNN)`` with ``from .rnn import RNN``), by qualified import name,
    # and the classes of the project's modules they are, once resolved (``Project.resolve_bases``: only when the
    # class is used, so a module is read only for the classes a file runs).
    imported_bases: list[str] = field(default_factory=list)
    foreign_bases: list["ClassInfo"] = field(default_factory=list, compare=False, repr=False)
    own_torch_base: str | None = field(default=None, compare=False, repr=False)  # from its own module alone
    module_classes: dict = field(default_factory=dict, compare=False, repr=False)  # its module's classes, by name
    # Bases named by a name that is neither a class of the module nor an import (``class Net(nn.Module, mixin)``
    # inside ``def make(mixin):``): a factory's argument, known only where the class statement runs (``bind``).
    late_bases: list[str] = field(default_factory=list)
    bound_from: "ClassInfo | None" = field(default=None, compare=False, repr=False)  # the class ``bind`` bound
    shared_by_copies: ClassVar[bool] = True  # see ``values.copy_values``
    # ``mro``'s last answer, with the module classes and the ``rebases`` count it was worked out under.
    mro_cache: tuple | None = field(default=None, init=False, compare=False, repr=False)
    rebases: ClassVar[int] = 0  # bumped by ``rebase``: any class's MRO through the rebased one may have changed
    # Its body's methods by name (the first ``def`` of each) and property setters (the first ``@name.setter``
    # ``def name``), made on first look-up: ``find_method`` and ``find_setter`` ask each class of an MRO at each
    # method call, and scanning the body every time was about 1.5 % of the analysis.
    own_defs: tuple[dict, dict] | None = field(default=None, init=False, compare=False, repr=False)

    def rebase(self, foreign: list["ClassInfo"]) -> None:
        """Set ``foreign_bases`` (see ``Project.resolve_bases``), making every class's cached MRO stale."""
        self.foreign_bases = foreign
        ClassInfo.rebases += 1

    @property
    def name(self) -> str:
        return self.node.name

    def defs(self) -> tuple[dict[str, ast.FunctionDef], dict[str, ast.FunctionDef]]:
        """(its methods, its property setters) by name: what ``own_method`` and ``find_setter``'s scan find."""
        if self.own_defs is None:
            methods: dict[str, ast.FunctionDef] = {}
            setters: dict[str, ast.FunctionDef] = {}
            for s in self.node.body:
                if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    methods.setdefault(s.name, s)
                    if isinstance(s, ast.FunctionDef) and s.name not in setters and any(
                            isinstance(d, ast.Attribute) and d.attr == "setter" and isinstance(d.value, ast.Name)
                            and d.value.id == s.name for d in s.decorator_list):
                        setters[s.name] = s
            self.own_defs = (methods, setters)
        return self.own_defs

    @property
    def is_module(self) -> bool:
        return self.torch_base is not None

    @property
    def init(self) -> ast.FunctionDef | None:
        return own_method(self.node, "__init__")


def bind(info: ClassInfo, bases: list[ClassInfo]) -> ClassInfo:
    """The class as one run of its class statement makes it: its late bases (see ``ClassInfo.late_bases``) the
    classes ``bases`` they named there, looked up after its other bases as Python's MRO does for later bases."""
    bound = replace(info, late_bases=[], foreign_bases=[*info.foreign_bases, *bases], bound_from=info)
    bound.torch_base = info.torch_base or next((b.torch_base for b in bases if b.torch_base), None)
    bound.autograd_function = info.autograd_function or any(b.autograd_function for b in bases)
    return bound


def own_method(node: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((s for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == name),
                None)


def find_classes(nodes: list[ast.ClassDef], imports: dict[str, str],
                 function_bases: frozenset[str] = frozenset(), module_path: str | None = None) -> dict[str, ClassInfo]:
    """The classes ``nodes`` (every class of the file in source order, found by the engine's one walk of it) by
    name (a later definition of a name wins, as at run time).  ``function_bases``: the qualified names of
    ``torch.autograd.Function`` and its public subclasses."""
    classes: dict[str, ClassInfo] = {}
    for node in nodes:
        info = ClassInfo(node, module_path=module_path)
        for base in node.bases:
            q = qualified_name(base, imports)
            if q is not None and q in function_bases:
                info.autograd_function = True
            elif q is not None and q.startswith("torch.nn."):
                info.torch_base = info.torch_base or normalize(q).rsplit(".", 1)[1]
            elif isinstance(base, ast.Name) and base.id in classes:
                info.bases.append(base.id)
            else:
                if q is not None and not q.startswith("builtins."):
                    info.imported_bases.append(q)
                elif q is None and isinstance(base, ast.Name):
                    info.late_bases.append(base.id)
                if (getattr(base, "attr", None) or getattr(base, "id", "")).endswith("Module"):
                    info.torch_base = info.torch_base or "Module"  # `nn.Module` through an import not resolved
        if any(_is_dataclass_decorator(d, imports) for d in node.decorator_list):
            info.fields = _own_fields(node, imports)
            info.dataclass_init = own_method(node, "__init__") is None and not any(
                isinstance(d, ast.Call) and k.arg == "init" and isinstance(k.value, ast.Constant)
                and k.value.value is False for d in node.decorator_list for k in getattr(d, "keywords", ()))
        info.module_classes = classes
        classes[node.name] = info
    for info in classes.values():  # inherit the torch base through the file's own bases
        info.own_torch_base = info.torch_base
        if info.torch_base is None:
            info.torch_base = next((b.torch_base for b in mro(classes, info)[1:] if b.torch_base), None)
        info.autograd_function = any(b.autograd_function for b in mro(classes, info))
    return classes


def _is_dataclass_decorator(dec: ast.expr, imports: dict[str, str]) -> bool:
    """``@dataclass``, ``@dataclasses.dataclass(...)``."""
    return qualified_name(dec.func if isinstance(dec, ast.Call) else dec, imports) == "dataclasses.dataclass"


def _own_fields(node: ast.ClassDef, imports: dict[str, str]) -> list[tuple[str, ast.expr | None]]:
    """The fields a dataclass body declares, in order, with their default (None: no default, or one the analysis
    does not evaluate, such as ``field(default_factory=...)``): every annotated name but ``ClassVar`` ones and
    ``field(init=False)``."""
    fields = []
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.simple):
            continue
        ann = stmt.annotation.value if isinstance(stmt.annotation, ast.Subscript) else stmt.annotation
        if (qualified_name(ann, imports) or "").endswith("ClassVar"):
            continue
        default = stmt.value
        if isinstance(default, ast.Call) and qualified_name(default.func, imports) == "dataclasses.field":
            if any(k.arg == "init" and isinstance(k.value, ast.Constant) and k.value.value is False
                   for k in default.keywords):
                continue
            default = next((k.value for k in default.keywords if k.arg == "default"), None)
        fields.append((stmt.target.id, default))
    return fields


def dataclass_fields(classes: dict[str, ClassInfo], info: ClassInfo) -> list[tuple[str, ast.expr | None]]:
    """The parameters of a dataclass's generated ``__init__``, in order: its bases' fields first, a field
    declared again keeping its first place and taking the later default."""
    fields: dict[str, ast.expr | None] = {}
    for cls in reversed(mro(classes, info)):
        fields.update(cls.fields)
    return list(fields.items())


def mro(classes: dict[str, ClassInfo], info: ClassInfo) -> tuple[ClassInfo, ...]:
    """The class and its bases, depth first, each once: those of its module (``classes``, for the class itself),
    then the resolved ones of other modules, whose own bases are looked up in their module.  Worked out once per
    class (kept on it until ``ClassInfo.rebase`` changes some class's bases)."""
    cached = info.mro_cache
    if cached is not None and cached[0] is classes and cached[1] == ClassInfo.rebases:
        return cached[2]
    order = _mro(classes, info)
    info.mro_cache = (classes, ClassInfo.rebases, order)
    return order


def _mro(classes: dict[str, ClassInfo], info: ClassInfo) -> tuple[ClassInfo, ...]:
    order: list[ClassInfo] = []
    stack = [(info, classes)]
    while stack:
        current, scope = stack.pop(0)
        if current in order:
            continue
        order.append(current)
        stack[0:0] = [*((scope[b], scope) for b in current.bases if b in scope),
                      *((b, b.module_classes) for b in current.foreign_bases)]
    return tuple(order)


def find_setter(classes: dict[str, ClassInfo], info: ClassInfo, name: str) -> tuple[ast.FunctionDef, ClassInfo] | None:
    """The ``@name.setter`` method along the class's MRO: ``obj.name = value`` runs it."""
    for cls in mro(classes, info):
        setter = cls.defs()[1].get(name)
        if setter is not None:
            return setter, cls
    return None


def find_method(classes: dict[str, ClassInfo], info: ClassInfo, name: str,
                after: ClassInfo | None = None) -> tuple[ast.FunctionDef, ClassInfo] | None:
    """``name`` looked up along the class's MRO (``after``: start past that class, as ``super()`` does)."""
    chain = mro(classes, info)
    if after is not None and after in chain:
        chain = chain[chain.index(after) + 1:]
    for cls in chain:
        method = cls.defs()[0].get(name)
        if method is not None:
            return method, cls
    return None
