"""Program transformations that rewrite a fixture into a differently-shaped but equivalent program.

Every transform has a ``name``, a one-line docstring and ``apply(source) -> str | None`` (None when it does not
apply to this fixture).  Only code reached from ``run()`` is rewritten (module-level functions and classes that
run() names, transitively; never ``reference()`` itself).  The statements a transform moves or wraps are the
*targets*: in a positive the lines that carry ``# expect: CODE`` (the comment travels with the statement, so the
variant's expected lines are found by reading its markers again), in a negative the statements that look like a
would-be culprit (an augmented assignment, a call of a method ending in ``_``, a subscript or ``.data`` store, an
``.step()`` call, an ``inplace=True`` argument).  Transforms are generic: they work from the syntax and from the
names a statement reads and writes, never from a fixture's names.  Whether a variant still behaves like its
original is not assumed here: the harness proves every variant with torch and drops the ones it does not confirm.
"""

from __future__ import annotations

import builtins
import json
import re
from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m

MARKER = re.compile(r"#\s*expect:\s*((?:GG\d{3}\s*)+)")  # the regex of tests/fixture_corpus.py

# ----------------------------------------------------------------------------------------------------------------
# shared analysis


def parse(source: str) -> cst.Module | None:
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None


def code_of(node: cst.CSTNode) -> str:
    """Source text of a statement (its trailing comment included)."""
    if isinstance(node, cst.BaseStatement):
        return cst.Module(body=[node]).code
    return cst.Module(body=[]).code_for_node(node)


def has_marker(stmt: cst.CSTNode) -> bool:
    if isinstance(stmt, cst.SimpleStatementLine):
        c = stmt.trailing_whitespace.comment
        return c is not None and bool(MARKER.search(c.value))
    return False


def module_is_positive(source: str) -> bool:
    return any(MARKER.search(line) for line in source.splitlines())


class _NameCollector(cst.CSTVisitor):
    """Names a node reads or writes (not attribute names, not keyword-argument names)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self.names.append(node.value)


def names_in(node: cst.CSTNode) -> list[str]:
    c = _NameCollector()
    node.visit(c)
    out: list[str] = []
    for n in c.names:
        if n not in out:
            out.append(n)
    return out


def target_names(t: cst.BaseExpression) -> list[str]:
    if isinstance(t, cst.Name):
        return [t.value]
    if isinstance(t, (cst.Tuple, cst.List)):
        return [n for e in t.elements for n in target_names(e.value)]
    if isinstance(t, cst.StarredElement):
        return target_names(t.value)
    return []


def param_names(params: cst.Parameters) -> list[str]:
    out = [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)]
    for p in (params.star_arg, params.star_kwarg):
        if isinstance(p, cst.Param):
            out.append(p.name.value)
    return out


class _Bound(cst.CSTVisitor):
    """Names bound in one function's own scope (not in nested functions, classes, lambdas, comprehensions)."""

    def __init__(self, root: cst.CSTNode) -> None:
        self.root = root
        self.names: set[str] = set()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        if node is self.root:
            return True
        self.names.add(node.name.value)
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.names.add(node.name.value)
        return False

    def visit_Lambda(self, node) -> bool:
        return False

    def visit_ListComp(self, node) -> bool:
        return False

    def visit_SetComp(self, node) -> bool:
        return False

    def visit_DictComp(self, node) -> bool:
        return False

    def visit_GeneratorExp(self, node) -> bool:
        return False

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            self.names.update(target_names(t.target))

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self.names.update(target_names(node.target))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.names.update(target_names(node.target))

    def visit_For(self, node: cst.For) -> None:
        self.names.update(target_names(node.target))

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self.names.update(target_names(node.asname.name))

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self.names.update(target_names(node.target))

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if node.name is not None:
            self.names.update(target_names(node.name.name))

    def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
        if node.asname is not None:
            self.names.update(target_names(node.asname.name))
        else:
            n = node.name
            while isinstance(n, cst.Attribute):
                n = n.value
            if isinstance(n, cst.Name):
                self.names.add(n.value)


def function_locals(fn: cst.FunctionDef) -> set[str]:
    b = _Bound(fn)
    fn.visit(b)
    return b.names | set(param_names(fn.params))


def _target_reads(t: cst.BaseExpression) -> list[str]:
    """Names an assignment target reads (``x`` of ``x[i] = v`` or ``x.a = v``; nothing for a bare name)."""
    if isinstance(t, cst.Name):
        return []
    if isinstance(t, (cst.Tuple, cst.List)):
        return [n for e in t.elements for n in _target_reads(e.value)]
    if isinstance(t, cst.StarredElement):
        return _target_reads(t.value)
    return names_in(t)


def stmt_reads(stmt: cst.SimpleStatementLine) -> list[str]:
    out: list[str] = []
    for s in stmt.body:
        if isinstance(s, cst.Assign):
            found = [n for t in s.targets for n in _target_reads(t.target)] + names_in(s.value)
        elif isinstance(s, cst.AnnAssign):
            found = _target_reads(s.target) + (names_in(s.value) if s.value is not None else [])
        else:
            found = names_in(s)
        out.extend(n for n in found if n not in out)
    return out


def stmt_writes(stmt: cst.SimpleStatementLine) -> list[str]:
    out: list[str] = []
    for s in stmt.body:
        targets: list[cst.BaseExpression] = []
        if isinstance(s, cst.Assign):
            targets = [t.target for t in s.targets]
        elif isinstance(s, (cst.AugAssign, cst.AnnAssign)):
            targets = [s.target]
        for t in targets:
            for n in target_names(t):
                if n not in out:
                    out.append(n)
    return out


_UNMOVABLE = (cst.Return, cst.Yield, cst.Await, cst.Break, cst.Continue, cst.Global, cst.Nonlocal, cst.NamedExpr,
              cst.Del, cst.Import, cst.ImportFrom)


def contains(node: cst.CSTNode, types: tuple) -> bool:
    found = []

    class V(cst.CSTVisitor):
        def on_visit(self, n):
            if isinstance(n, types):
                found.append(n)
            return not found

    node.visit(V())
    return bool(found)


def movable(stmt: cst.SimpleStatementLine) -> bool:
    """A statement that can move into another function unchanged."""
    if contains(stmt, _UNMOVABLE):
        return False
    return "super" not in names_in(stmt) and "__class__" not in names_in(stmt)


def _call_attr(call: cst.Call) -> str | None:
    return call.func.attr.value if isinstance(call.func, cst.Attribute) else None


def looks_like_culprit(stmt: cst.SimpleStatementLine) -> bool:
    """The negative's would-be culprits: statements shaped like the positives' culprit lines."""
    for s in stmt.body:
        if isinstance(s, cst.AugAssign):
            return True
        if isinstance(s, (cst.Assign, cst.AnnAssign)):
            targets = [t.target for t in s.targets] if isinstance(s, cst.Assign) else [s.target]
            for t in targets:
                if isinstance(t, cst.Subscript) or (isinstance(t, cst.Attribute) and t.attr.value == "data"):
                    return True
                if m.findall(t, m.Attribute(attr=m.Name("data"))):
                    return True
        for call in m.findall(s, m.Call()):
            attr = _call_attr(call)
            if attr and attr.endswith("_") and not attr.endswith("__") and attr not in ("requires_grad_",):
                return True
            if attr == "step" and not call.args:
                return True
            for a in call.args:
                if a.keyword is not None and a.keyword.value == "inplace" and m.matches(a.value, m.Name("True")):
                    return True
    return False


@dataclass
class Program:
    """One fixture, parsed, with the module-level definitions reached from run()."""

    source: str
    module: cst.Module
    positive: bool
    defs: dict[str, cst.CSTNode] = field(default_factory=dict)
    scope: set[str] = field(default_factory=set)
    all_names: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, source: str) -> Program | None:
        module = parse(source)
        if module is None:
            return None
        prog = cls(source, module, module_is_positive(source))
        for stmt in module.body:
            if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                prog.defs[stmt.name.value] = stmt
        if "run" not in prog.defs:
            return None
        todo = ["run"]
        while todo:
            name = todo.pop()
            if name in prog.scope or name == "reference":
                continue
            prog.scope.add(name)
            todo.extend(n for n in names_in(prog.defs[name]) if n in prog.defs)
        prog.all_names = set(names_in(module)) | {
            n.value for n in m.findall(module, m.Name())
        }
        return prog

    def fresh(self, base: str) -> str:
        """A name not used anywhere in the module nor a builtin (``base``, ``base_2``, ...)."""
        name, i = base, 2
        while name in self.all_names or hasattr(builtins, name):
            name, i = f"{base}_{i}", i + 1
        self.all_names.add(name)
        return name

    def is_target(self, stmt: cst.CSTNode, top: str | None) -> bool:
        if not isinstance(stmt, cst.SimpleStatementLine):
            return False
        if self.positive:
            return has_marker(stmt)
        return top in self.scope and looks_like_culprit(stmt)

    def torch_alias(self) -> str | None:
        """The name ``import torch`` binds (``torch`` or its ``as`` name)."""
        for imp in m.findall(self.module, m.Import()):
            for a in imp.names:
                if m.matches(a.name, m.Name("torch")):
                    return a.asname.name.value if a.asname else "torch"
        return None

    def nn_alias(self) -> str | None:
        """An expression text that names ``torch.nn`` in this module."""
        for imp in m.findall(self.module, m.Import()):
            for a in imp.names:
                if code_of(a.name) == "torch.nn" and a.asname:
                    return a.asname.name.value
        for imp in m.findall(self.module, m.ImportFrom()):
            if imp.module is not None and code_of(imp.module) == "torch" and not isinstance(imp.names, cst.ImportStar):
                for a in imp.names:
                    if code_of(a.name) == "nn":
                        return a.asname.name.value if a.asname else "nn"
        t = self.torch_alias()
        return f"{t}.nn" if t else None


def import_insert_index(module: cst.Module) -> int:
    """Index in module.body just after the leading docstring and imports."""
    idx = 0
    for i, stmt in enumerate(module.body):
        if isinstance(stmt, cst.SimpleStatementLine) and all(
            isinstance(s, (cst.Import, cst.ImportFrom)) or (isinstance(s, cst.Expr) and isinstance(s.value, cst.SimpleString))
            for s in stmt.body
        ):
            idx = i + 1
        else:
            break
    return idx


def add_module_items(module: cst.Module, items: list[cst.BaseStatement], imports: list[str] = ()) -> cst.Module:
    """Insert definitions after the imports (two blank lines before each) and new import lines with the imports."""
    body = list(module.body)
    idx = import_insert_index(module)
    new_imports = [cst.parse_statement(line + "\n") for line in imports if line + "\n" not in module.code]
    spaced = [it.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()]) for it in items]
    if spaced and idx < len(body):
        nxt = body[idx]
        body[idx] = nxt.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    body[idx:idx] = new_imports + spaced
    return module.with_changes(body=body)


def indent(text: str, prefix: str = "    ") -> str:
    return "".join(prefix + line if line.strip() else line for line in text.splitlines(keepends=True))


def bare(stmt: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
    return stmt.with_changes(leading_lines=[])


# ----------------------------------------------------------------------------------------------------------------
# the statement-level machinery: visit each target statement with its enclosing functions


@dataclass
class Site:
    """Where a target statement is: its enclosing functions (outermost first) and module-level owner."""

    functions: list[cst.FunctionDef]
    top: str | None
    original: cst.CSTNode

    @property
    def function(self) -> cst.FunctionDef:
        return self.functions[-1]

    def locals(self) -> set[str]:
        out: set[str] = set()
        for fn in self.functions:
            out |= function_locals(fn)
        return out


class StatementRewriter(cst.CSTTransformer):
    """Calls ``rewrite(stmt, site) -> list of statements | None`` for each target statement inside a function."""

    def __init__(self, prog: Program, rewrite) -> None:
        super().__init__()
        self.prog = prog
        self.rewrite = rewrite
        self.stack: list[cst.CSTNode] = []
        self.changed = 0

    def visit_FunctionDef(self, node) -> None:
        self.stack.append(node)

    def leave_FunctionDef(self, original, updated):
        self.stack.pop()
        return updated

    def visit_ClassDef(self, node) -> None:
        self.stack.append(node)

    def leave_ClassDef(self, original, updated):
        self.stack.pop()
        return updated

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock):
        if not self.stack or not isinstance(self.stack[-1], cst.FunctionDef):
            return updated
        top = self.stack[0].name.value
        fns = [n for n in self.stack if isinstance(n, cst.FunctionDef)]
        body: list[cst.BaseStatement] = []
        for orig, stmt in zip(original.body, updated.body):
            if self.prog.is_target(stmt, top):
                new = self.rewrite(stmt, Site(fns, top, orig))
                if new is not None:
                    body.extend(new)
                    self.changed += 1
                    continue
            body.append(stmt)
        return updated.with_changes(body=body)


def rewrite_statements(source: str, rewrite, extra=None) -> str | None:
    """Apply ``rewrite`` to every target statement; ``extra(prog, module, rewriter)`` may add module items."""
    prog = Program.of(source)
    if prog is None:
        return None
    rw = StatementRewriter(prog, lambda stmt, site: rewrite(prog, stmt, site))
    rw.module_items: list[cst.BaseStatement] = []
    rw.imports: list[str] = []
    rw.prog = prog
    rw.outer = rw
    prog.rewriter = rw
    module = prog.module.visit(rw)
    if not rw.changed:
        return None
    module = add_module_items(module, rw.module_items, rw.imports)
    return module.code


def _lead(stmt: cst.SimpleStatementLine, new: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """Give the first new statement the leading lines (blank lines, comments) of the one it replaces."""
    if new:
        new[0] = new[0].with_changes(leading_lines=stmt.leading_lines)
    return new


def _interface(prog: Program, stmt: cst.SimpleStatementLine, site: Site) -> tuple[list[str], list[str]] | None:
    """(names to pass in, names to return) for moving ``stmt`` out of its function."""
    if not movable(stmt):
        return None
    local = site.locals()
    reads = [n for n in stmt_reads(stmt) if n in local]
    writes = stmt_writes(stmt)
    return reads, writes


def _call_text(callee: str, reads: list[str], writes: list[str]) -> str:
    lhs = ""
    if writes:
        lhs = (", ".join(writes) + ("," if len(writes) == 1 and False else "")) + " = "
    return f"{lhs}{callee}({', '.join(reads)})\n"


def _body_text(stmt: cst.SimpleStatementLine, writes: list[str]) -> str:
    text = code_of(bare(stmt))
    if writes:
        text += f"return {', '.join(writes)}\n"
    return text


# ----------------------------------------------------------------------------------------------------------------
# transforms


class Transform:
    name = "?"
    kind = "py"  # or "ipynb": apply() returns the notebook's JSON text

    def apply(self, source: str) -> str | None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<transform {self.name}>"


class HelperFunction(Transform):
    """Move the culprit statement into a module-level helper function (reads passed in, rebinds returned)."""

    name = "helper_function"

    def apply(self, source):
        def rewrite(prog, stmt, site):
            iface = _interface(prog, stmt, site)
            if iface is None:
                return None
            reads, writes = iface
            fname = prog.fresh("apply_update")
            helper = f"def {fname}({', '.join(reads)}):\n" + indent(_body_text(stmt, writes))
            prog.rewriter.module_items.append(cst.parse_statement(helper))
            return _lead(stmt, [cst.parse_statement(_call_text(fname, reads, writes))])

        return rewrite_statements(source, rewrite)


class ModuleMethod(Transform):
    """Move the culprit statement into forward() of an nn.Module subclass, called on an instance."""

    name = "module_method"

    def apply(self, source):
        def rewrite(prog, stmt, site):
            nn = prog.nn_alias()
            iface = _interface(prog, stmt, site)
            if iface is None or nn is None:
                return None
            reads, writes = iface
            cname = prog.fresh("UpdateBlock")
            inst = prog.fresh("update_block")
            me = "module" if "module" not in reads else prog.fresh("mod")
            cls = (f"class {cname}({nn}.Module):\n    def forward({', '.join([me] + reads)}):\n"
                   + indent(_body_text(stmt, writes), "        "))
            prog.rewriter.module_items.append(cst.parse_statement(cls))
            return _lead(stmt, [cst.parse_statement(f"{inst} = {cname}()\n"),
                                cst.parse_statement(_call_text(inst, reads, writes))])

        return rewrite_statements(source, rewrite)


class CallableClass(Transform):
    """Move the culprit statement into ``__call__`` of a plain class (``class Step:`` / ``class Step(object):``)."""

    name = "callable_class"

    def apply(self, source):
        def rewrite(prog, stmt, site):
            iface = _interface(prog, stmt, site)
            if iface is None:
                return None
            reads, writes = iface
            cname = prog.fresh("Step")
            base = "(object)" if len(prog.rewriter.module_items) % 2 == len(source) % 2 else ""
            me = "self" if "self" not in reads else prog.fresh("step_self")
            cls = (f"class {cname}{base}:\n    def __call__({', '.join([me] + reads)}):\n"
                   + indent(_body_text(stmt, writes), "        "))
            prog.rewriter.module_items.append(cst.parse_statement(cls))
            inst = prog.fresh("step")
            return _lead(stmt, [cst.parse_statement(f"{inst} = {cname}()\n"),
                                cst.parse_statement(_call_text(inst, reads, writes))])

        return rewrite_statements(source, rewrite)


class Closure(Transform):
    """Move the culprit statement into a nested def that captures its tensors (``nonlocal`` where it rebinds)."""

    name = "closure"

    def apply(self, source):
        def rewrite(prog, stmt, site):
            if not movable(stmt):
                return None
            writes = stmt_writes(stmt)
            fn = site.function
            # a name the statement alone binds cannot be nonlocal (no binding left): return it instead
            bound_elsewhere = _bound_without(fn, site.original) | set(param_names(fn.params))
            nonlocal_names = [w for w in writes if w in bound_elsewhere]
            returned = [w for w in writes if w not in bound_elsewhere]
            fname = prog.fresh("update")
            text = f"def {fname}():\n"
            if nonlocal_names:
                text += f"    nonlocal {', '.join(nonlocal_names)}\n"
            text += indent(_body_text(stmt, returned))
            return _lead(stmt, [cst.parse_statement(text), cst.parse_statement(_call_text(fname, [], returned))])

        return rewrite_statements(source, rewrite)


def _bound_without(fn: cst.FunctionDef, stmt: cst.CSTNode) -> set[str]:
    """Names ``fn`` binds when ``stmt`` is left out."""

    class Drop(cst.CSTTransformer):
        def on_leave(self, original, updated):
            if original is stmt:
                return cst.SimpleStatementLine([cst.Pass()])
            return updated

    dropped = fn.visit(Drop())
    b = _Bound(dropped)
    dropped.visit(b)
    return b.names


def _receiver(stmt: cst.SimpleStatementLine) -> tuple[cst.Name, str] | None:
    """The Name whose tensor the statement mutates, and how: 'aug' (x += ...), 'method' (x.m_(...)),
    'store' (x[...] = v or x.data... = v)."""
    if len(stmt.body) != 1:
        return None
    s = stmt.body[0]

    def root(e):
        while isinstance(e, (cst.Attribute, cst.Subscript)):
            e = e.value
        return e if isinstance(e, cst.Name) else None

    if isinstance(s, cst.AugAssign):
        if isinstance(s.target, cst.Name):
            return s.target, "aug"
        r = root(s.target)
        return (r, "store") if r is not None else None
    if isinstance(s, cst.Assign) and len(s.targets) == 1:
        t = s.targets[0].target
        if isinstance(t, (cst.Subscript, cst.Attribute)):
            r = root(t)
            if r is not None:
                return r, "store"
    value = s.value if isinstance(s, (cst.Expr, cst.Assign)) else None
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
        attr = value.func.attr.value
        if attr.endswith("_") and not attr.endswith("__"):
            r = root(value.func.value)
            if r is not None:
                return r, "method"
    return None


class _ReplaceFirst(cst.CSTTransformer):
    """Replace one Name node (by identity) with an expression."""

    def __init__(self, target: cst.Name, expr: cst.BaseExpression) -> None:
        super().__init__()
        self.target, self.expr = target, expr

    def leave_Name(self, original, updated):
        return self.expr if original is self.target else updated


def _mutate_through(prog, stmt, site, make_holder, access_text, iterate=False):
    """Rewrite ``stmt`` so the tensor it mutates is reached through a container (or aliases)."""
    rec = _receiver(stmt)
    if rec is None:
        return None
    name, how = rec
    if name.value not in site.locals() or name.value == "self":
        return None
    if iterate and how == "aug":
        return None
    holder_stmts, access, iter_source = make_holder(prog, name.value)
    new_stmt = bare(stmt).visit(_ReplaceFirst(name, cst.parse_expression(access)))
    out = [cst.parse_statement(t) for t in holder_stmts]
    if iterate:
        loop = cst.parse_statement(f"for {access} in {iter_source}:\n    pass\n")
        out.append(loop.with_changes(body=loop.body.with_changes(body=[new_stmt])))
    else:
        out.append(new_stmt)
        if how == "aug":  # keep the name bound to what the statement produced (a Python number is rebound)
            out.append(cst.parse_statement(f"{name.value} = {access}\n"))
    return _lead(stmt, out)


class ContainerList(Transform):
    """Put the mutated tensor in a list and mutate it through indexing (``ts[0] += ...``)."""

    name = "container_list"

    def apply(self, source):
        def holder(prog, x):
            ts = prog.fresh(f"{x}_list")
            return [f"{ts} = [{x}]\n"], f"{ts}[0]", None

        return rewrite_statements(source, lambda p, s, site: _mutate_through(p, s, site, holder, None))


class ContainerDict(Transform):
    """Put the mutated tensor in a dict and mutate it through a key (``d["x"].mul_(...)``)."""

    name = "container_dict"

    def apply(self, source):
        def holder(prog, x):
            d = prog.fresh("tensors")
            return [f"{d} = {{{json.dumps(x)}: {x}}}\n"], f"{d}[{json.dumps(x)}]", None

        return rewrite_statements(source, lambda p, s, site: _mutate_through(p, s, site, holder, None))


class ContainerIter(Transform):
    """Put the mutated tensor in a list and mutate it while iterating (``for t in ts: t.mul_(...)``)."""

    name = "container_iter"

    def apply(self, source):
        def holder(prog, x):
            ts = prog.fresh(f"{x}_group")
            t = prog.fresh("t")
            return [f"{ts} = [{x}]\n"], t, ts

        return rewrite_statements(source, lambda p, s, site: _mutate_through(p, s, site, holder, None, iterate=True))


class AliasChain(Transform):
    """Reach the mutated tensor through two aliases (``a = x; b = a; b.add_(...)``)."""

    name = "alias_chain"

    def apply(self, source):
        def holder(prog, x):
            a = prog.fresh(f"{x}_ref")
            b = prog.fresh(f"{x}_cur")
            return [f"{a} = {x}\n", f"{b} = {a}\n"], b, None

        return rewrite_statements(source, lambda p, s, site: _mutate_through(p, s, site, holder, None))


def _wrap(template: str):
    """A rewrite that puts the statement inside a compound statement built from ``template`` (``{body}`` slot)."""

    def rewrite(prog, stmt, site):
        if contains(stmt, (cst.Return, cst.Break, cst.Continue, cst.Yield)):
            return None
        text = template.format(torch=prog.torch_alias() or "torch")
        wrapper = cst.parse_statement(text)
        inner = [bare(stmt)]

        class Fill(cst.CSTTransformer):
            def leave_IndentedBlock(self, original, updated):
                if any(isinstance(s, cst.SimpleStatementLine) and m.matches(s, m.SimpleStatementLine([m.Expr(m.Ellipsis())]))
                       for s in updated.body):
                    return updated.with_changes(body=[
                        inner[0] if m.matches(s, m.SimpleStatementLine([m.Expr(m.Ellipsis())])) else s
                        for s in updated.body])
                return updated

        return _lead(stmt, [wrapper.visit(Fill())])

    return rewrite


class WrapIf(Transform):
    """Wrap the culprit statement in ``if True:``."""

    name = "wrap_if_true"

    def apply(self, source):
        return rewrite_statements(source, _wrap("if True:\n    ...\n"))


class WrapTry(Transform):
    """Wrap the culprit statement in ``try: ... finally: pass``."""

    name = "wrap_try"

    def apply(self, source):
        return rewrite_statements(source, _wrap("try:\n    ...\nfinally:\n    pass\n"))


class WrapLoopOnce(Transform):
    """Wrap the culprit statement in a one-iteration ``for _ in range(1):`` loop."""

    name = "wrap_loop_once"

    def apply(self, source):
        return rewrite_statements(source, _wrap("for _ in range(1):\n    ...\n"))


class WrapEnableGrad(Transform):
    """Wrap the culprit statement in ``with torch.enable_grad():`` (only outside no_grad code)."""

    name = "wrap_enable_grad"

    def apply(self, source):
        prog = Program.of(source)
        if prog is None or prog.torch_alias() is None or re.search(r"no_grad|inference_mode|set_grad_enabled", source):
            return None
        return rewrite_statements(source, _wrap("with {torch}.enable_grad():\n    ...\n"))


# ----------------------------------------------------------------------------------------------------------------
# module-level rewriters: only the definitions in scope (reached from run) are rewritten


def rewrite_scope(source: str, make_transformer) -> str | None:
    """Run ``make_transformer(prog)`` (a CSTTransformer with a ``changed`` count) on each in-scope definition."""
    prog = Program.of(source)
    if prog is None:
        return None
    tr = make_transformer(prog)
    if tr is None:
        return None
    body = []
    for stmt in prog.module.body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and stmt.name.value in prog.scope:
            stmt = stmt.visit(tr)
        body.append(stmt)
    if not getattr(tr, "changed", 0):
        return None
    module = prog.module.with_changes(body=body)
    module = add_module_items(module, getattr(tr, "module_items", []), getattr(tr, "imports", []))
    return module.code


class ImportAlias(Transform):
    """``import torch as T`` and every ``torch`` reference in run's code written ``T``."""

    name = "import_alias"

    def apply(self, source):
        def make(prog):
            if prog.torch_alias() != "torch":
                return None
            alias = prog.fresh("T")

            class Rename(cst.CSTTransformer):
                changed = 0
                imports = [f"import torch as {alias}"]

                def visit_Attribute(self, node):
                    return True

                def leave_Name(self, original, updated):
                    if updated.value == "torch":
                        self.changed += 1
                        return updated.with_changes(value=alias)
                    return updated

                def leave_Attribute(self, original, updated):
                    # the attribute part of `x.torch` is never the module
                    if original.attr.value == "torch" and updated.attr.value == alias:
                        return updated.with_changes(attr=original.attr)
                    return updated

                def visit_Arg(self, node):
                    return True

                def leave_Arg(self, original, updated):
                    if original.keyword is not None:
                        return updated.with_changes(keyword=original.keyword)
                    return updated

            return Rename()

        return rewrite_scope(source, make)


ALL: list[Transform] = [
    HelperFunction(), ModuleMethod(), CallableClass(), Closure(), ContainerList(), ContainerDict(), ContainerIter(),
    AliasChain(), WrapIf(), WrapTry(), WrapLoopOnce(), WrapEnableGrad(), ImportAlias(),
]
BY_NAME = {t.name: t for t in ALL}
