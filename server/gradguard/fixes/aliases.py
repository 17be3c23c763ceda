"""Who else can see a tensor's memory: a conservative, syntactic alias and liveness check for one write.

Rebinding a name (``x = x + y`` instead of ``x += y``) gives the same program only when nothing but that
name reads the written memory afterwards.  The engine knows which values share storage but its events do
not say which *names* hold them, so the fixes work it out from the code of the enclosing function:

- **aliases**: names that may hold the same storage -- views (``v = x.view(-1)``, ``a, b = x.unbind()``,
  ``x[0]``, ``x.T``), ``.detach()``, and the tensor the written name was itself made from that way;
- **holders**: names of containers or objects that may keep a reference (``outs.append(x)``,
  ``d = Dist(logits=x)``, ``pair = (x, y)``);
- **escapes**: places the tensor leaves the function's locals (``self.h = x``, ``foo(x)`` with the result
  dropped, ``yield x``, closures, ``global``), and a function parameter (the caller holds it).

The write is *clean* when no alias or holder that existed before the write is read after it (a loop
around both counts as before and after), nothing escaped before it, and the storage is not the caller's.
Anything not understood counts against the fix; the worst outcome of a wrong "unclean" is an unsafe fix.
"""

from __future__ import annotations

import ast
import bisect
from functools import cached_property

from ..inference.sharing import Report
from ..knowledge import load_knowledge
from ..knowledge.names import (
    FRESH_METHODS,
    JOINING,
    MAY_ALIAS_METHODS,
    NON_VALUE_ATTRS,
    SHARING_ATTRS,
    TORCH_MAY_ALIAS,
)
from ..statements import block_of
from .context import FUNCTIONS, FixContext
from .index import own_code

# Builtins that neither keep nor return the tensor.
NO_ALIAS_BUILTINS = frozenset({
    "print", "len", "isinstance", "issubclass", "repr", "str", "float", "int", "bool", "type", "id", "hash",
    "round", "abs", "format", "callable", "hasattr", "sum", "max", "min", "any", "all", "divmod", "pow",
})
# Builtins that return a container or iterator over their argument.
CONTAINER_BUILTINS = frozenset({
    "list", "tuple", "iter", "reversed", "enumerate", "zip", "sorted", "dict", "set", "frozenset", "map",
    "filter", "next",
})

ALIAS, CONTAINER = "alias", "container"


class AliasAnalysis:
    """Alias, holder and escape facts about one name in one scope, relative to one write statement."""

    def __init__(self, ctx: FixContext, write: ast.stmt, name: str, write_call: ast.Call | None = None):
        self.ctx = ctx
        self.write = write
        self.write_call = write_call  # the in-place call itself: what it returns is the rebound value
        self.name = name
        self.scope = ctx.scope_of(write)
        self.knowledge = load_knowledge()
        names = ctx.scope_names(self.scope)
        self.loads, self.bindings = names.loads, names.bindings  # shared: read, never changed
        self.aliases: dict[str, list[ast.AST]] = {name: []}  # name -> binding events that made it an alias
        self.holders: dict[str, list[ast.AST]] = {}
        self.escapes: list[tuple[str, ast.AST]] = []
        self._run()

    # ------------------------------------------------------------ positions
    @cached_property
    def _write_loops(self) -> frozenset[int]:
        """The ids of the loops around the write (in its scope): asked of every event, made once."""
        return frozenset(id(loop) for loop in self.ctx.loops_around(self.write, self.scope))

    def _when(self, node: ast.AST) -> str:
        """"before", "after" or "both" (a loop around node and the write) relative to the write."""
        self.ctx.spend()
        write = self.write
        if self._write_loops and self._write_loops & {id(loop) for loop in self.ctx.loops_around(node, self.scope)}:
            return "both"
        start = _start(node)
        if start < (write.lineno, write.col_offset):
            return "before"
        if start >= (write.end_lineno, write.end_col_offset):
            return "after"
        return "before"  # inside the write statement: evaluated before the store

    # ------------------------------------------------------------ the fixpoint
    def _run(self) -> None:
        changed = True
        seen_loads: set[int] = set()
        seen_bindings: set[int] = set()
        while changed:
            changed = False
            for alias in list(self.aliases) + list(self.holders):
                kind = ALIAS if alias in self.aliases else CONTAINER
                for load in self.loads.get(alias, []):
                    key = (id(load) << 1) | (kind == ALIAS)
                    if key in seen_loads:
                        continue
                    seen_loads.add(key)
                    changed |= self._follow(load, kind)
            for alias in list(self.aliases):
                for target in self.bindings.get(alias, []):
                    if id(target) in seen_bindings:
                        continue
                    seen_bindings.add(id(target))
                    for source in self._sources_of_binding(target):
                        if source not in self.aliases:
                            self.aliases[source] = [target]
                            changed = True

    def _add(self, table: dict[str, list[ast.AST]], name: str, event: ast.AST) -> bool:
        if name in self.aliases or (table is self.holders and name in self.holders):
            self.aliases.get(name, self.holders.get(name, [])).append(event)
            return False
        table.setdefault(name, []).append(event)
        return True

    def _bind_target(self, target: ast.AST, kind: str, event: ast.AST, unpacking_of_name: bool = False) -> bool:
        changed = False
        if isinstance(target, ast.Name):
            table = self.aliases if kind == ALIAS else self.holders
            return self._add(table, target.id, event)
        if isinstance(target, (ast.Tuple, ast.List)):
            names = [e.value if isinstance(e, ast.Starred) else e for e in target.elts]
            if kind == ALIAS and any(isinstance(n, ast.Name) and n.id == self.name for n in names):
                # `a, b = t.unbind(0)` where `a` is the written name: its siblings are other memory.
                return False
            for elt in names:
                changed |= self._bind_target(elt, kind, event)
            return changed
        if isinstance(target, ast.Starred):
            return self._bind_target(target.value, CONTAINER, event)
        if isinstance(target, ast.Subscript):
            root = _root_name(target.value)
            if root is not None and root != "self":
                return self._add(self.holders, root, event)
            self.escapes.append((f"it is stored into `{self.ctx.source(target)}`", event))
            return False
        if isinstance(target, ast.Attribute):
            self.escapes.append((f"it is stored into `{self.ctx.source(target)}`", event))
            return False
        return False

    def _follow(self, load: ast.Name, kind: str) -> bool:
        """Walk up from a read of an alias/holder to where its value (or a view of it) ends up."""
        self.ctx.spend()
        parents = self.ctx.parents
        cur: ast.AST = load
        while True:
            p = parents.get(cur)
            if p is None:
                return False
            if isinstance(p, (ast.Attribute, ast.Subscript)) and p.value is cur and not isinstance(p.ctx, ast.Load):
                return False  # a write through it (`v[0] = 1`, `v.grad = None`) is not a read
            if isinstance(p, ast.Attribute) and p.value is cur:
                gp = parents.get(p)
                if isinstance(gp, ast.Call) and gp.func is p:
                    if gp is self.write_call:
                        return False
                    method = p.attr
                    if method in NON_VALUE_ATTRS or (kind == ALIAS and method in FRESH_METHODS):
                        return False
                    if kind == CONTAINER and method in ("append", "extend", "insert", "add", "update", "setdefault"):
                        return False  # adding to the holder does not make the element escape further
                    cur = gp  # views, in-place methods (return self) and unknown methods may alias
                    continue
                if p.attr in NON_VALUE_ATTRS:
                    return False
                if kind == ALIAS and p.attr not in SHARING_ATTRS:
                    return False  # some other attribute of a tensor
                cur = p
                continue
            if isinstance(p, ast.Subscript):
                if p.value is cur:
                    cur = p  # basic indexing is a view; an element of a holder may be the tensor
                    continue
                return False  # used as an index
            if isinstance(p, (ast.BinOp, ast.UnaryOp, ast.Compare)):
                if kind == CONTAINER and isinstance(p, ast.BinOp) and isinstance(p.op, ast.Add):
                    cur = p  # list concatenation keeps the elements
                    continue
                return False
            if isinstance(p, ast.BoolOp) or (isinstance(p, ast.IfExp) and cur is not p.test):
                cur = p
                continue
            if isinstance(p, ast.IfExp):
                return False
            if isinstance(p, ast.NamedExpr) and p.value is cur:
                changed = self._bind_target(p.target, kind, p)
                cur = p
                if changed:
                    return True
                continue
            if isinstance(p, ast.Starred):
                cur = p
                continue
            if isinstance(p, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
                gp = parents.get(p)
                if isinstance(gp, (ast.Assign, ast.AnnAssign)) and gp.value is p and kind == ALIAS:
                    # `a, b = x, y`: element-wise when the target is a tuple of the same length
                    targets = gp.targets if isinstance(gp, ast.Assign) else [gp.target]
                    index = next((i for i, e in enumerate(getattr(p, "elts", [])) if e is cur), None)
                    changed = False
                    for target in targets:
                        if isinstance(target, (ast.Tuple, ast.List)) and index is not None and len(target.elts) == len(p.elts):
                            changed |= self._bind_target(target.elts[index], ALIAS, gp)
                        else:
                            changed |= self._bind_target(target, CONTAINER, gp)
                    return changed
                kind = CONTAINER
                cur = p
                continue
            if isinstance(p, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
                kind = CONTAINER
                cur = p
                continue
            if isinstance(p, ast.comprehension):
                if cur is p.iter:
                    # the comprehension's variables see the elements; its result may hold them
                    self._bind_target(p.target, ALIAS if kind == ALIAS else CONTAINER, p.target)
                    comp = parents.get(p)
                    kind = CONTAINER
                    cur = comp
                    continue
                return False
            if isinstance(p, ast.keyword):
                cur = p
                continue
            if p is self.write_call:
                return False
            if isinstance(p, ast.Call) and cur is not p.func:
                result = self._call_result(p, cur, kind)
                if result is None:
                    return False
                if result == "escape":
                    self.escapes.append((f"it is passed to `{self.ctx.source(p.func)}`", p))
                    return False
                kind = result
                cur = p
                continue
            if isinstance(p, ast.Call):
                return False
            if isinstance(p, (ast.Assign, ast.AnnAssign)) and p.value is cur:
                targets = p.targets if isinstance(p, ast.Assign) else [p.target]
                changed = False
                for target in targets:
                    changed |= self._bind_target(target, kind, p)
                return changed
            if isinstance(p, ast.AugAssign) and p.value is cur:
                # `outs += [x]` keeps it; `total += x` reads it
                return self._bind_target(p.target, CONTAINER, p) if kind == CONTAINER else False
            if isinstance(p, (ast.For, ast.AsyncFor)) and cur is p.iter:
                return self._bind_target(p.target, ALIAS, p)
            if isinstance(p, (ast.Yield, ast.YieldFrom, ast.Await)):
                self.escapes.append(("it is yielded", p))
                return False
            if isinstance(p, ast.Return):
                return False  # nothing runs after a return
            if isinstance(p, ast.Expr):
                return False
            if isinstance(p, ast.withitem):
                self.escapes.append(("it is used as a context manager", p.context_expr))
                return False
            if isinstance(p, (ast.If, ast.While, ast.Assert, ast.Delete, ast.Raise)):
                return False
            if isinstance(p, (ast.FormattedValue, ast.JoinedStr)):
                return False
            if isinstance(p, ast.Lambda):
                self.escapes.append(("a lambda captures it", p))
                return False
            self.escapes.append((f"it is used in `{self.ctx.source(p)[:40]}`", p))
            return False

    def _call_result(self, call: ast.Call, arg: ast.AST, kind: str) -> str | None:
        """What a call does with a tensor passed in: None (nothing kept), ALIAS/CONTAINER (the result may
        hold it), or "escape" (it may be kept somewhere we cannot see)."""
        func = call.func
        q = self.ctx.qual(func)
        statement_call = isinstance(self.ctx.parents.get(call), ast.Expr)
        if q is not None and q.startswith("torch."):
            name = q.rsplit(".", 1)[1]
            op = self.knowledge.op(name)
            keywords = {k.arg for k in call.keywords}
            if "out" in keywords or "inplace" in keywords or name.endswith("_") or name in TORCH_MAY_ALIAS:
                return kind
            if op is not None and (op.view or op.multi_view):
                return kind
            if name in JOINING or name in ("dstack", "where"):
                return None
            if q.startswith("torch.nn.init."):
                return None
            if q.split(".")[1] in ("optim",):
                return "escape"  # an optimizer keeps its parameters
            if name[:1].isupper():
                return CONTAINER  # a torch class (Distribution, Parameter, ...) keeps its arguments
            return None
        if isinstance(func, ast.Name) and func.id not in self.ctx.imports:
            if func.id in NO_ALIAS_BUILTINS:
                return None
            if func.id in CONTAINER_BUILTINS:
                return CONTAINER
        if isinstance(func, ast.Attribute) and _only_returns_views(self.ctx, self.knowledge, call):
            # a method of the file's own class that just returns views of its arguments (`model.split(out)`)
            return kind if any(a is arg for a in _returned_arguments(self.ctx, self.knowledge,
                                                                      _method_of_file_class(self.ctx, call), call)) else None
        if isinstance(func, ast.Attribute):
            method = func.attr
            op = self.knowledge.op(method)
            if method in FRESH_METHODS or (op is not None and not (op.view or op.multi_view) and not method.endswith("_")):
                return None  # a tensor op (`scores.masked_fill(mask, 0)`) reads its arguments
            receiver = _root_name(func.value)
            if receiver is not None and receiver != "self" and receiver not in self.ctx.imports:
                self._add(self.holders, receiver, call)  # `outs.append(h)`: outs may keep it
                return None if statement_call else CONTAINER
        # a module (`self.fc(x)`) or an unknown function: its result may be (or hold) the argument
        if statement_call:
            return "escape"
        return CONTAINER

    def _sources_of_binding(self, target: ast.Name) -> list[str]:
        """Names whose memory a binding of an alias name was made from (``v = x.view(-1)`` -> ``x``)."""
        parents = self.ctx.parents
        node: ast.AST = target
        p = parents.get(node)
        while isinstance(p, (ast.Tuple, ast.List, ast.Starred)):
            node, p = p, parents.get(p)
        value = None
        if isinstance(p, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and getattr(p, "value", None) is not None:
            value = p.value
        elif isinstance(p, (ast.For, ast.AsyncFor, ast.comprehension)) and node is p.target:
            value = p.iter
        if value is None:
            return []
        held: list[ast.Attribute] = []
        names = _view_sources(value, self.ctx, self.knowledge, held)
        for attr in held:  # `h = self.buf`: the object keeps the same tensor
            self.escapes.append((f"`{self.ctx.source(attr)}` is the same tensor", target))
        return names

    # ------------------------------------------------------------ verdict
    def report(self) -> Report:
        rep = Report(self.name)
        for alias, events in self.aliases.items():
            if alias == self.name:
                continue
            if self._read_after(alias) and (not events or any(self._when(e) != "after" for e in events)):
                rep.aliases_read_after.append(alias)
        for holder, events in self.holders.items():
            if holder == self.name:
                continue
            if self._read_after(holder) and any(self._when(e) != "after" for e in events):
                rep.holders_read_after.append(holder)
        for why, event in self.escapes:
            if self._when(event) != "after":
                rep.escapes.append(why)
        names = set(self.aliases) | set(self.holders)
        scope, own = self.scope, self.ctx.scope_names(self.scope)
        if isinstance(scope, FUNCTIONS):
            params = {a.arg for a in (*scope.args.posonlyargs, *scope.args.args, *scope.args.kwonlyargs)}
            for extra in (scope.args.vararg, scope.args.kwarg):
                if extra is not None:
                    params.add(extra.arg)
            for name in sorted(names & params):
                if not self._rebound_before(name):
                    rep.escapes.append(f"`{name}` is a parameter: the caller holds the same tensor")
        else:
            rep.escapes.extend(f"`{name}` is a global that functions of this module read"
                               for name in sorted(names & own.nested))
        rep.escapes.extend("it is declared global or nonlocal" for declared in own.declarations if names & declared)
        if own.nested & names:
            rep.escapes.append("a nested function or class uses it")
        return rep

    def _read_after(self, name: str) -> bool:
        for load in self._reads_not_before(name):
            if self._when(load) == "before":
                continue
            parent = self.ctx.parents.get(load)
            if isinstance(parent, ast.Attribute) and parent.attr in NON_VALUE_ATTRS:
                continue
            return True
        return False

    def _reads_not_before(self, name: str) -> list[ast.Name] | tuple[ast.Name, ...]:
        """The reads of ``name`` that may come after the write: with no loop around the write, those that start
        after it ends (found by position, not by asking ``_when`` of every read of a long statement)."""
        loads = self.loads.get(name, [])
        if self._write_loops:
            return loads
        ordered = self.ctx.once(f"reads of {name} in order", self.scope,
                                lambda: sorted(loads, key=lambda n: (n.lineno, n.col_offset)))
        first = bisect.bisect_left(ordered, (self.write.end_lineno, self.write.end_col_offset),
                                   key=lambda n: (n.lineno, n.col_offset))
        return ordered[first:]

    def _rebound_before(self, name: str) -> bool:
        """Is ``name`` certainly assigned on every path from the function's start to the write?"""
        child: ast.AST = self.write
        for anc in self.ctx.ancestors(self.write):
            for stmt in block_of(anc, child) or ():
                if stmt is child:
                    break
                if _assigns(stmt, name):
                    return True
            if anc is self.scope:
                return False
            child = anc
        return False


def _start(node: ast.AST) -> tuple[int, int]:
    if hasattr(node, "lineno"):
        return node.lineno, node.col_offset
    for sub in ast.walk(node):
        if hasattr(sub, "lineno"):
            return sub.lineno, sub.col_offset
    return 0, 0


def _assigns(stmt: ast.stmt, name: str) -> bool:
    targets: list[ast.AST] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        targets = [stmt.target]
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
                return True
    return False


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _view_sources(expr: ast.AST, ctx: FixContext, knowledge, held: list | None = None) -> list[str]:
    """Names whose memory ``expr`` may be (a view of): descend through views, detach, indexing.  Attributes
    reached that way (``self.buf``, ``model.weight[0]``) are added to ``held``: their object keeps the tensor."""
    out: list[str] = []
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name):
            out.append(node.id)
        elif isinstance(node, ast.Subscript):
            stack.append(node.value)
        elif isinstance(node, ast.Attribute):
            if node.attr in SHARING_ATTRS:
                stack.append(node.value)
            elif held is not None and _root_name(node) not in ctx.imports:
                held.append(node)
        elif isinstance(node, ast.Starred):
            stack.append(node.value)
        elif isinstance(node, (ast.Tuple, ast.List)):
            stack.extend(node.elts)
        elif isinstance(node, ast.BoolOp):
            stack.extend(node.values)
        elif isinstance(node, ast.IfExp):
            stack.extend([node.body, node.orelse])
        elif isinstance(node, ast.NamedExpr):
            stack.append(node.value)
        elif isinstance(node, ast.Call):
            func = node.func
            module_function = isinstance(func, ast.Attribute) and _root_name(func.value) in ctx.imports
            if isinstance(func, ast.Attribute) and not module_function:
                method = func.attr
                own = _method_of_file_class(ctx, node)
                passed = _returned_arguments(ctx, knowledge, own, node) if own is not None else None
                if passed is not None:  # `model.split(out)`, `GaussianHead.split` returning views of `out`
                    stack.extend(passed)
                    continue
                op = knowledge.op(method)
                if method in MAY_ALIAS_METHODS or method.endswith("_") or (op is not None and (op.view or op.multi_view)):
                    stack.append(func.value)
                continue
            q = ctx.qual(func)
            if q is not None and q.startswith("torch.") and node.args:
                name = q.rsplit(".", 1)[1]
                op = knowledge.op(name)
                if name in TORCH_MAY_ALIAS or name.endswith("_") or (op is not None and (op.view or op.multi_view)):
                    stack.append(node.args[0])
                elif any(k.arg == "out" for k in node.keywords):
                    stack.extend(k.value for k in node.keywords if k.arg == "out")
    return out


def _method_of_file_class(ctx: FixContext, call: ast.Call) -> ast.FunctionDef | None:
    """The method ``call`` runs when its receiver is plainly an instance of a class this file defines: ``self``
    in that class, or a name its function binds once, to ``Cls(...)``.  None otherwise (a tensor method, say)."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return None
    receiver, scope = func.value.id, ctx.scope_of(call)
    classes = {c.name: c for c in ctx.tree.body if isinstance(c, ast.ClassDef)}
    owner = ctx.class_of(call) if receiver == "self" else None
    if owner is None:
        bindings = ctx.scope_names(scope).bindings.get(receiver, [])
        if len(bindings) != 1:
            return None
        stmt = ctx.parents.get(bindings[0])
        made = stmt.value if isinstance(stmt, ast.Assign) and stmt.targets == [bindings[0]] else None
        owner = classes.get(made.func.id) if isinstance(made, ast.Call) and isinstance(made.func, ast.Name) else None
    if owner is None or classes.get(owner.name) is not owner:
        return None
    methods = [m for m in owner.body if isinstance(m, ast.FunctionDef) and m.name == func.attr]
    return methods[0] if len(methods) == 1 and not owner.bases[1:] else None


def _returned_arguments(ctx: FixContext, knowledge, method: ast.FunctionDef, call: ast.Call) -> list[ast.expr] | None:
    """The arguments of ``call`` whose memory ``method`` may return (each ``return`` a view of parameters only);
    None when a return may hold anything else (an attribute of ``self``, a global, a fresh tensor's view...)."""
    params = [a.arg for a in method.args.args][1:]  # after self
    if method.args.vararg or method.args.kwarg or any(isinstance(a, ast.Starred) for a in call.args) \
            or any(k.arg is None for k in call.keywords) or method.decorator_list and not all(
                isinstance(d, ast.Call) and ctx.qual(d.func) in ("torch.no_grad", "torch.inference_mode")
                for d in method.decorator_list):
        return None
    returns, generator = ctx.once("returns, and whether it yields", method, lambda: (
        [n for n in own_code(method) if isinstance(n, ast.Return)],
        any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in own_code(method))))
    if not returns or generator:
        return None
    named: set[str] = set()
    for ret in returns:
        if ret.value is None:
            continue
        held: list[ast.Attribute] = []
        sources = _view_sources(ret.value, ctx, knowledge, held)
        if held or not set(sources) <= set(params) or any(name in ctx.scope_names(method).bindings for name in sources):
            return None
        named.update(sources)
    by_name = dict(zip(params, call.args))
    by_name.update({k.arg: k.value for k in call.keywords if k.arg in params})
    return [by_name[name] for name in sorted(named) if name in by_name]


def _only_returns_views(ctx: FixContext, knowledge, call: ast.Call) -> bool:
    """Whether ``call`` runs a method of the file's own class whose body (docstring aside) is one ``return`` of
    views of its parameters: it keeps nothing, and its result is only (views of) what it was passed."""
    method = _method_of_file_class(ctx, call)
    if method is None:
        return False
    body = method.body[1:] if isinstance(method.body[0], ast.Expr) and isinstance(method.body[0].value, ast.Constant) \
        else method.body
    return len(body) == 1 and isinstance(body[0], ast.Return) and _returned_arguments(ctx, knowledge, method, call) is not None


def analyse(ctx: FixContext, write: ast.stmt, name: str, write_call: ast.Call | None = None) -> Report:
    """What the code says: for a write no run reported (the probe's), or a caller's statement (``writes.from_run``: the
    run's facts)."""
    return AliasAnalysis(ctx, write, name, write_call).report()


def value_read_after(ctx: FixContext, write: ast.stmt, name: str) -> bool:
    """Is ``name``'s value (not just ``.grad`` or ``.shape``) read after the write (or around it in a loop)?"""
    return AliasAnalysis(ctx, write, name)._read_after(name)
