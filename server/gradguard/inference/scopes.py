"""The names a function binds itself, and the names a piece of code can resolve only outside itself.

Python's rule: a name a function binds anywhere in its body (a parameter, an assignment, a ``for``/``with``/``except
... as``/``match`` target, ``del``, a walrus, a nested ``def``) is that function's local everywhere in it, unless it
is declared ``global`` or ``nonlocal``; a comprehension's targets are the comprehension's own.  The interpreter
never resolves a local outside its function, even where it has no value for it yet (``_expr_Name``), so what the
rest of the file binds under that name cannot change the function's analysis: ``free_names`` leaves it out of what
a cache key follows (``engine._Fingerprints``).  Attribute names and strings are not names: nothing resolves a
module variable, function or class from them (``getattr`` with a constant reads an attribute of a known value).

Kept, as the interpreter resolves them by name whatever the function binds: a class defined inside a function
(looked up among the file's classes by name, ``Context.classes``), an import inside a function (an import), and
``type`` (``type(x)`` is Python's only when no scope binds ``type``, ``calls._is_builtin_type``)."""

from __future__ import annotations

import ast

from ..statements import node_fields, syntax_fact

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_LOOKED_UP_IN_EVERY_SCOPE = frozenset({"type"})


class _Scope:
    """One scope's names: every name its code mentions, those it binds, those declared ``global``/``nonlocal``,
    and the scopes nested in it (defs, lambdas, classes: each resolves its own names)."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.bound: set[str] = set()
        self.declared: set[str] = set()
        self.nested: list[ast.AST] = []

    def visit(self, node: ast.AST) -> None:
        # by a stack, not recursion, past the ``ctx`` markers (``statements.every_node``), and each kind of node
        # told by its type once (``_kind``): what it finds is sets, so the order it goes in does not matter
        # (``nested`` is only gone through in turn)
        stack = [node]
        fields, kinds = node_fields, _KINDS
        while stack:
            node = stack.pop()
            kind = kinds.get(type(node))
            if kind is None:
                kind = kinds[type(node)] = _kind(type(node))
            if kind is _NAME:
                self.names.add(node.id)
                if isinstance(node.ctx, (ast.Store, ast.Del)):
                    self.bound.add(node.id)
                continue
            if kind is not _OTHER:
                if kind is _SCOPE:
                    stack += _outer_parts(node)
                    if isinstance(node, _DEFS):
                        self.bound.add(node.name)
                    elif isinstance(node, ast.ClassDef):
                        self.names.add(node.name)
                    self.nested.append(node)
                    continue
                if kind is _COMPREHENSION:
                    self._comprehension(node)
                    continue
                if kind is _DECLARATION:
                    self.declared.update(node.names)
                elif kind is _IMPORT:
                    self.names.update((a.asname or a.name).split(".")[0] for a in node.names)
                elif kind is _NAMED and node.name:
                    self.names.add(node.name)
                    self.bound.add(node.name)
                elif kind is _REST and node.rest:
                    self.names.add(node.rest)
                    self.bound.add(node.rest)
            for name in fields(type(node)):
                value = getattr(node, name, None)
                if isinstance(value, ast.AST):
                    stack.append(value)
                elif isinstance(value, list):
                    stack += [item for item in value if isinstance(item, ast.AST)]

    def _comprehension(self, node: ast.AST) -> None:
        """Its first iterable is read here; its targets are its own; the rest reads this scope (a walrus in it
        binds this scope's name)."""
        self.visit(node.generators[0].iter)
        inner = _Scope()
        for index, gen in enumerate(node.generators):
            for part in (gen.target, *([gen.iter] if index else []), *gen.ifs):
                inner.visit(part)
        for part in (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,):
            inner.visit(part)
        own = {n.id for gen in node.generators for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
        self.names |= inner.names - own
        self.bound |= inner.bound - own
        self.declared |= inner.declared
        self.nested += inner.nested


_NAME, _SCOPE, _COMPREHENSION, _DECLARATION, _IMPORT, _NAMED, _REST, _OTHER = (
    "name", "scope", "comprehension", "declaration", "import", "named", "rest", "other")
_KINDS: dict[type, str] = {}


def _kind(kind: type) -> str:
    """What ``_Scope.visit`` does with a node of this type."""
    for types, found in ((ast.Name, _NAME), ((*_DEFS, ast.ClassDef, ast.Lambda), _SCOPE),
                         (_COMPREHENSIONS, _COMPREHENSION), ((ast.Global, ast.Nonlocal), _DECLARATION),
                         ((ast.Import, ast.ImportFrom), _IMPORT), ((ast.ExceptHandler, ast.MatchAs, ast.MatchStar), _NAMED),
                         (ast.MatchMapping, _REST)):
        if issubclass(kind, types):
            return found
    return _OTHER


def _outer_parts(node: ast.AST) -> list[ast.AST]:
    """What a def, lambda or class statement evaluates in the scope around it."""
    if isinstance(node, ast.ClassDef):
        return [*node.decorator_list, *node.bases, *node.keywords]
    args = node.args
    parts = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
    if isinstance(node, _DEFS):
        parts += node.decorator_list
        parts += [a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg)
                  if a is not None and a.annotation is not None]
        if node.returns is not None:
            parts.append(node.returns)
    return parts


def _inside(node: ast.AST) -> _Scope:
    """The scope a def, lambda or class opens (its parameters and body)."""
    scope = _Scope()
    if isinstance(node, ast.ClassDef):
        for stmt in node.body:
            scope.visit(stmt)
        return scope
    args = node.args
    for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
        if a is not None:
            scope.names.add(a.arg)
            scope.bound.add(a.arg)
    for stmt in ([node.body] if isinstance(node, ast.Lambda) else node.body):
        scope.visit(stmt)
    return scope


def bound_names(fn: ast.AST) -> frozenset[str]:
    """The locals of a def or lambda that the interpreter never looks up outside it (see the module's text).  Kept
    on the node: a project module's function is asked again by each file whose analysis follows a call into it."""
    def work_out() -> frozenset[str]:
        scope = _inside(fn)
        return frozenset(scope.bound - scope.declared)

    return syntax_fact(fn, "_gradguard_locals", work_out)


def free_names(node: ast.AST) -> frozenset[str]:
    """The names ``node`` (a def, a class, or a module-level statement) may resolve outside itself."""
    return scope_names(node)[0]


def scope_names(node: ast.AST) -> tuple[frozenset[str], frozenset[str]]:
    """``node``'s free names and its own locals (``bound_names``; none for a class or a statement), in one walk.

    Free: everything its code mentions but a def's or lambda's own locals.  A class body's names are all kept (a
    name it binds is read from the module before the binding), and so is a nested function's name of its
    enclosing function's local (its closure's value may be missing, then the module's is read)."""
    own: frozenset[str] = frozenset()
    if isinstance(node, (*_DEFS, ast.ClassDef, ast.Lambda)):
        outer = _Scope()
        for part in _outer_parts(node):
            outer.visit(part)
        names = set(outer.names)
        pending = [*outer.nested, node]
    else:
        top = _Scope()
        top.visit(node)
        names, pending = set(top.names), list(top.nested)
    while pending:
        scope_node = pending.pop()
        scope = _inside(scope_node)
        if isinstance(scope_node, ast.ClassDef):
            names |= scope.names
        else:
            locals_ = scope.bound - scope.declared
            names |= (scope.names - locals_) | (scope.names & _LOOKED_UP_IN_EVERY_SCOPE)
            if scope_node is node:
                own = frozenset(locals_)
        pending += scope.nested
    return frozenset(names), own


def module_bound(node: ast.AST) -> frozenset[str]:
    """The module names a top-level statement can bind: a target anywhere in its blocks (``for``/``with`` bodies, a
    walrus, ``except ... as``, ``match``, a def in an ``if``; not an import, resolved as one, nor a comprehension's
    own targets), and a name that a function it defines, at any depth, declares ``global`` (bound when it runs)."""
    declared = {name for inner in ast.walk(node) if isinstance(inner, ast.Global) for name in inner.names}
    if isinstance(node, (*_DEFS, ast.ClassDef)):
        return frozenset(declared)
    scope = _Scope()
    scope.visit(node)
    return frozenset(scope.bound | declared)
