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
from collections import Counter
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


_PROGRAMS: dict = {}
_MEMO: dict = {}


def _memo(method):
    """Memoise a Program method on (source, method): the module tree is the same for every transform."""

    def wrapper(self):
        key = (self.source, method.__name__)
        if key not in _MEMO:
            if len(_MEMO) > 4096:
                _MEMO.clear()
            _MEMO[key] = method(self)
        return _MEMO[key]

    wrapper.__name__ = method.__name__
    wrapper.__doc__ = method.__doc__
    return wrapper


@dataclass
class Program:
    """One fixture, parsed, with the module-level definitions reached from run()."""

    source: str
    module: cst.Module
    positive: bool
    defs: dict[str, cst.CSTNode] = field(default_factory=dict)
    scope: set[str] = field(default_factory=set)
    all_names: set[str] = field(default_factory=set)

    marked: set[str] = field(default_factory=set)  # module-level definitions that hold a marker
    bare: set[str] = field(default_factory=set)  # every plain name (not attribute) the module uses

    @classmethod
    def of(cls, source: str) -> Program | None:
        """Parsed once per source (libcst trees are immutable, so transforms share them)."""
        base = _PROGRAMS.get(source)
        if base is None:
            base = cls._build(source)
            if len(_PROGRAMS) > 512:
                _PROGRAMS.clear()
            _PROGRAMS[source] = base
        if base is False:
            return None
        return cls(base.source, base.module, base.positive, base.defs, base.scope, set(base.all_names), base.marked,
                   base.bare)

    @classmethod
    def _build(cls, source: str):
        module = parse(source)
        if module is None:
            return False
        prog = cls(source, module, module_is_positive(source))
        for stmt in module.body:
            if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                prog.defs[stmt.name.value] = stmt
                if prog.positive and MARKER.search(code_of(stmt)):
                    prog.marked.add(stmt.name.value)
        if "run" not in prog.defs:
            return False
        todo = ["run"]
        while todo:
            name = todo.pop()
            if name in prog.scope or name == "reference":
                continue
            prog.scope.add(name)
            todo.extend(n for n in names_in(prog.defs[name]) if n in prog.defs)
        prog.all_names = set(re.findall(r"[A-Za-z_]\w*", source))
        prog.bare = set(names_in(module))
        return prog

    def visited(self, name: str) -> bool:
        """Whether a statement rewriter needs to enter this module-level definition."""
        return name in (self.marked if self.positive else self.scope)

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

    @_memo
    def torch_alias(self) -> str | None:
        """The name ``import torch`` binds (``torch`` or its ``as`` name)."""
        for imp in m.findall(self.module, m.Import()):
            for a in imp.names:
                if m.matches(a.name, m.Name("torch")):
                    return a.asname.name.value if a.asname else "torch"
        return None

    @_memo
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

    @_memo
    def functional_alias(self) -> str | None:
        """The name bound to ``torch.nn.functional`` (``F``), if any."""
        for imp in m.findall(self.module, m.Import()):
            for a in imp.names:
                if code_of(a.name) == "torch.nn.functional" and a.asname:
                    return a.asname.name.value
        for imp in m.findall(self.module, m.ImportFrom()):
            if imp.module is not None and code_of(imp.module) == "torch.nn" and not isinstance(imp.names, cst.ImportStar):
                for a in imp.names:
                    if code_of(a.name) == "functional":
                        return a.asname.name.value if a.asname else "functional"
        return None

    def module_classes(self) -> set[str]:
        """Module-level classes that derive (transitively, by name) from something called ``Module``."""
        out: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, node in self.defs.items():
                if isinstance(node, cst.ClassDef) and name not in out:
                    for b in node.bases:
                        txt = code_of(b.value)
                        if txt.endswith("Module") or txt in out or re.search(r"\bnn\.[A-Z]", txt):
                            out.add(name)
                            changed = True
                            break
        return out


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
    relayed: bool = False  # the statement's caller-bound expectation went to an `expect-if-moved` line

    @property
    def function(self) -> cst.FunctionDef:
        return self.functions[-1]

    def locals(self) -> set[str]:
        out: set[str] = set()
        for fn in self.functions:
            if id(fn) not in _LOCALS or _LOCALS[id(fn)][0] is not fn:
                _LOCALS[id(fn)] = (fn, function_locals(fn))
            out |= _LOCALS[id(fn)][1]
        return out


_LOCALS: dict = {}


class StatementRewriter(cst.CSTTransformer):
    """Calls ``rewrite(stmt, site) -> list of statements | None`` for each target statement inside a function."""

    def __init__(self, prog: Program, rewrite) -> None:
        super().__init__()
        self.prog = prog
        self.rewrite = rewrite
        self.stack: list[cst.CSTNode] = []
        self.changed = 0
        self.relayed: set[int] = set()  # functions whose `expect-if-moved` lines became expectations

    def visit_FunctionDef(self, node) -> None:
        self.stack.append(node)

    def leave_FunctionDef(self, original, updated):
        self.stack.pop()
        if id(original) in self.relayed:
            return updated.visit(_Relay())
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
                site = Site(fns, top, orig)
                new = self.rewrite(stmt, site)
                if site.relayed:
                    self.relayed.add(id(fns[-1]))
                if new is not None:
                    body.extend(new)
                    self.changed += 1
                    continue
            body.append(stmt)
        return updated.with_changes(body=body)


def rewrite_statements(source: str, rewrite) -> str | None:
    """Apply ``rewrite(prog, stmt, site)`` to every target statement; it may add ``prog.rewriter.module_items``."""
    prog = Program.of(source)
    if prog is None:
        return None
    rw = StatementRewriter(prog, lambda stmt, site: rewrite(prog, stmt, site))
    rw.module_items: list[cst.BaseStatement] = []
    rw.imports: list[str] = []
    prog.rewriter = rw
    body = [stmt.visit(rw) if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and prog.visited(stmt.name.value)
            else stmt for stmt in prog.module.body]
    module = prog.module.with_changes(body=body)
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


# A marker that says `caller-bound` (`# expect: GG101 caller-bound`) names a line whose fix belongs to the function
# that runs it (compute again a stale value the line reads after an optimizer step; give the optimizer that
# function uses a module the line replaces; turn grad mode back on in the decorated function that turned it off):
# moved into a helper, the expectation goes with the helper's call, not into the helper's body.
CALLER_BOUND = "caller-bound"
# Moved into a helper, a caller-bound line can make its function the shape of another fixture whose line to change
# is elsewhere in that function (an optimizer built before a helper call that replaces a module is built after the
# call: its own line is the one to change).  That line says so with `# expect-if-moved: CODE`: the caller-bound
# expectation goes to it instead of to the helper's call.  Left in place, the line is no expectation.
RELAYED = re.compile(r"#\s*expect-if-moved:\s*((?:GG\d{3}\s*)+)")


# A marker that says `name-bound` (`# expect: GG101 name-bound`) names a line whose finding is the binding it makes of
# a name of its function (it drops what the name held): moved into a helper, the expectation goes to the line that
# binds that name in the function, which is the helper's call when the call assigns what the helper returns, and the
# line itself when a closure binds the name `nonlocal`.
NAME_BOUND = "name-bound"


def _caller_bound(stmt: cst.SimpleStatementLine, returned: list[str]) -> str | None:
    """The marker of ``stmt`` when, moved into a helper that returns ``returned``, it goes to the helper's call."""
    comment = stmt.trailing_whitespace.comment
    if not has_marker(stmt):
        return None
    return comment.value if CALLER_BOUND in comment.value or (NAME_BOUND in comment.value and returned) else None


def _call_text(callee: str, reads: list[str], writes: list[str], stmt: cst.SimpleStatementLine | None = None,
               site: Site | None = None) -> str:
    lhs = ", ".join(writes) + " = " if writes else ""
    marker = _caller_bound(stmt, writes) if stmt is not None else None
    if marker and site is not None and RELAYED.search(code_of(site.function)):
        site.relayed = True  # the rewriter turns the function's `expect-if-moved` lines into its expectations
        marker = None
    return f"{lhs}{callee}({', '.join(reads)})" + (f"  {marker}" if marker else "") + "\n"


class _Relay(cst.CSTTransformer):
    """``# expect-if-moved: CODE`` -> ``# expect: CODE`` on every line of a function."""

    def leave_TrailingWhitespace(self, original, updated):
        c = updated.comment
        if c is None or not RELAYED.search(c.value):
            return updated
        return updated.with_changes(comment=cst.Comment(RELAYED.sub(lambda m: f"# expect: {m.group(1)}", c.value)))


def _body_text(stmt: cst.SimpleStatementLine, writes: list[str]) -> str:
    if _caller_bound(stmt, writes):
        stmt = stmt.with_changes(trailing_whitespace=stmt.trailing_whitespace.with_changes(
            whitespace=cst.SimpleWhitespace(""), comment=None))
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
            return _lead(stmt, [cst.parse_statement(_call_text(fname, reads, writes, stmt, site))])

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
                                cst.parse_statement(_call_text(inst, reads, writes, stmt, site))])

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
                                cst.parse_statement(_call_text(inst, reads, writes, stmt, site))])

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
            return _lead(stmt, [cst.parse_statement(text),
                                cst.parse_statement(_call_text(fname, [], returned, stmt, site))])

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


class Wrap(Transform):
    """Wrap the culprit statement in a compound statement (one instance per wrapper, see ``WRAPPERS``)."""

    def __init__(self, name: str, doc: str, template: str, skip: str | None = None):
        self.name, self.__doc__, self.template = name, doc, template
        self.skip = re.compile(skip) if skip else None  # source this wrapper would change the meaning of

    def apply(self, source):
        if self.skip is not None:
            prog = Program.of(source)
            if prog is None or prog.torch_alias() is None or self.skip.search(source):
                return None
        return rewrite_statements(source, _wrap(self.template))


WRAPPERS = [
    Wrap("wrap_if_true", "Wrap the culprit statement in ``if True:``.", "if True:\n    ...\n"),
    Wrap("wrap_try", "Wrap the culprit statement in ``try: ... finally: pass``.",
         "try:\n    ...\nfinally:\n    pass\n"),
    Wrap("wrap_loop_once", "Wrap the culprit statement in a one-iteration ``for _ in range(1):`` loop.",
         "for _ in range(1):\n    ...\n"),
    Wrap("wrap_enable_grad", "Wrap the culprit statement in ``with torch.enable_grad():`` (only outside no_grad code).",
         "with {torch}.enable_grad():\n    ...\n", skip=r"no_grad|inference_mode|set_grad_enabled"),
]


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


def _is_call_of(node: cst.CSTNode, base: str | None, attr_pred) -> str | None:
    """``base.attr(...)`` where base's code is ``base`` and attr_pred(attr): the attr, else None."""
    if base is None or not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return None
    if code_of(node.func.value) != base or not attr_pred(node.func.attr.value):
        return None
    return node.func.attr.value


def _params_call(node) -> bool:
    return (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
            and node.func.attr.value == "parameters" and not node.args)


def _star_list(*calls) -> cst.List:
    return cst.List([cst.StarredElement(c) for c in calls])


class StarParams(Transform):
    """Star-unpack parameter iterables (``[*model.parameters()]``, ``[*a.parameters(), *b.parameters()]``)."""

    name = "star_params"

    def apply(self, source):
        class Tr(cst.CSTTransformer):
            changed = 0

            def leave_Call(self, original, updated):
                # list(m.parameters()) -> [*m.parameters()]; chain(a.parameters(), b.parameters()) -> [*a..., *b...]
                f = code_of(updated.func)
                if f == "list" and len(updated.args) == 1 and _params_call(updated.args[0].value):
                    self.changed += 1
                    return _star_list(updated.args[0].value)
                if f.endswith("chain") and updated.args and all(_params_call(a.value) for a in updated.args):
                    self.changed += 1
                    return _star_list(*[a.value for a in updated.args])
                if f in ("list", "tuple", "iter", "chain", "itertools.chain"):
                    return updated
                args = []
                for a in updated.args:
                    if _params_call(a.value) and a.star == "":
                        self.changed += 1
                        a = a.with_changes(value=_star_list(a.value))
                    args.append(a)
                return updated.with_changes(args=args)

            def leave_BinaryOperation(self, original, updated):
                if isinstance(updated.operator, cst.Add) and all(
                        isinstance(x, cst.List) and all(isinstance(e, cst.StarredElement) for e in x.elements)
                        for x in (updated.left, updated.right)):
                    return cst.List([*updated.left.elements, *updated.right.elements])
                return updated

            def leave_For(self, original, updated):
                if _params_call(updated.iter):
                    self.changed += 1
                    return updated.with_changes(iter=_star_list(updated.iter))
                return updated

            def leave_CompFor(self, original, updated):
                if _params_call(updated.iter):
                    self.changed += 1
                    return updated.with_changes(iter=_star_list(updated.iter))
                return updated

        return rewrite_scope(source, lambda prog: Tr())


_FACTORIES = {"randn", "rand", "randint", "zeros", "ones", "tensor", "full", "empty", "arange", "linspace", "eye",
              "randn_like", "rand_like", "zeros_like", "ones_like", "full_like", "empty_like", "as_tensor",
              "from_numpy", "randperm", "normal", "manual_seed", "no_grad", "enable_grad", "set_grad_enabled",
              "inference_mode", "is_grad_enabled", "device", "Generator", "is_tensor", "get_default_dtype"}
_SUBMODULES = {"nn", "optim", "autograd", "distributions", "linalg", "fft", "special", "utils", "cuda", "jit",
               "testing", "backends", "random", "sparse", "func", "masked", "nested", "onnx", "amp", "library"}


def _op_calls(prog: Program):
    """(module text, predicate on the attribute) for the torch and torch.nn.functional ops run's code calls."""
    out = []
    t, f = prog.torch_alias(), prog.functional_alias()
    if t:
        out.append((t, lambda a: a[:1].islower() and a not in _FACTORIES and a not in _SUBMODULES))
    if f:
        out.append((f, lambda a: a[:1].islower()))
    return out


class _CallThrough(cst.CSTTransformer):
    """Replace ``torch.op(...)``/``F.op(...)`` calls by a local callable defined at the top of the function."""

    def __init__(self, prog: Program, define):
        super().__init__()
        self.prog, self.define, self.changed = prog, define, 0
        self.stack: list[dict] = []
        self.imports: list[str] = []

    def visit_FunctionDef(self, node):
        self.stack.append({})

    def leave_FunctionDef(self, original, updated):
        defs = self.stack.pop()
        if not defs or not isinstance(updated.body, cst.IndentedBlock):
            return updated
        body = list(updated.body.body)
        at = 1 if body and m.matches(body[0], m.SimpleStatementLine([m.Expr(m.SimpleString())])) else 0
        new = [cst.parse_statement(text) for text in defs.values()]
        if at < len(body):
            new[0] = new[0].with_changes(leading_lines=body[at].leading_lines)
            body[at] = body[at].with_changes(leading_lines=[])
        body[at:at] = new
        return updated.with_changes(body=updated.body.with_changes(body=body))

    def leave_Call(self, original, updated):
        if not self.stack:
            return updated
        for base, pred in _op_calls(self.prog):
            attr = _is_call_of(updated, base, pred)
            if attr is None:
                continue
            key = (base, attr)
            defs = self.stack[-1]
            if key not in defs:
                made = self.define(self, base, attr, updated)
                if made is None:
                    return updated
                defs[key] = made
            name = defs[key].split("=", 1)[0].strip()
            self.changed += 1
            return updated.with_changes(func=cst.Name(name))
        return updated


class PartialCall(Transform):
    """Call torch / F ops through ``f = functools.partial(torch.op)`` defined in the function."""

    name = "partial_call"

    def apply(self, source):
        def define(tr, base, attr, call):
            tr.imports = ["import functools"]
            return f"{tr.prog.fresh(attr + '_fn')} = functools.partial({base}.{attr})\n"

        return rewrite_scope(source, lambda prog: _CallThrough(prog, define))


class LambdaCall(Transform):
    """Call torch / F ops through ``op = lambda t, *a, **k: torch.op(t, *a, **k)`` defined in the function."""

    name = "lambda_call"

    def apply(self, source):
        def define(tr, base, attr, call):
            if not call.args or call.args[0].keyword is not None or call.args[0].star:
                return None
            return f"{tr.prog.fresh(attr + '_op')} = lambda t, *args, **kwargs: {base}.{attr}(t, *args, **kwargs)\n"

        return rewrite_scope(source, lambda prog: _CallThrough(prog, define))


class FromImport(Transform):
    """``from torch import sigmoid`` (and ``from torch.nn.functional import relu``) for the ops run's code calls."""

    name = "from_import"

    def apply(self, source):
        def make(prog):
            t, f = prog.torch_alias(), prog.functional_alias()
            modules = {}
            if t:
                modules[t] = "torch"
            if f:
                modules[f] = "torch.nn.functional"
            if not modules:
                return None
            taken = prog.bare | set(dir(builtins))

            class Tr(cst.CSTTransformer):
                changed = 0
                names: dict = {}
                imports: list = []

                def leave_Call(self, original, updated):
                    fn = updated.func
                    if not (isinstance(fn, cst.Attribute) and isinstance(fn.value, cst.Name)
                            and fn.value.value in modules):
                        return updated
                    attr = fn.attr.value
                    if not attr[:1].islower() or attr in _SUBMODULES:
                        return updated
                    key = (fn.value.value, attr)
                    if key not in self.names:
                        local = attr if attr not in taken and attr not in {n for n in self.names.values()} \
                            else prog.fresh(f"{fn.value.value.lower()}_{attr}")
                        self.names[key] = local
                        mod = modules[fn.value.value]
                        self.imports.append(f"from {mod} import {attr}" + (f" as {local}" if local != attr else ""))
                    self.changed += 1
                    return updated.with_changes(func=cst.Name(self.names[key]))

            return Tr()

        return rewrite_scope(source, make)


class AutogradVariable(Transform):
    """``torch.autograd.Variable(torch.randn(...), requires_grad=True)`` for leaves made with ``requires_grad=True``."""

    name = "autograd_variable"

    def apply(self, source):
        def make(prog):
            t = prog.torch_alias()
            if t is None:
                return None

            class Tr(cst.CSTTransformer):
                changed = 0

                def leave_Call(self, original, updated):
                    if not (isinstance(updated.func, cst.Attribute) and code_of(updated.func.value) == t):
                        return updated
                    kw = [a for a in updated.args if a.keyword is not None and a.keyword.value == "requires_grad"]
                    if len(kw) != 1 or not m.matches(kw[0].value, m.Name("True")):
                        return updated
                    rest = [a for a in updated.args if a is not kw[0]]
                    if rest:
                        rest[-1] = rest[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                    self.changed += 1
                    inner = updated.with_changes(args=rest)
                    return cst.parse_expression(f"{t}.autograd.Variable(x, requires_grad=True)").with_changes(
                        args=[cst.Arg(inner, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                              cst.parse_expression("f(requires_grad=True)").args[0]])

            return Tr()

        return rewrite_scope(source, make)


_CONTAINERS = {"Sequential", "ModuleList", "ModuleDict", "Module", "Parameter", "ParameterList", "ParameterDict"}


def _layer_call(node, nn: str | None) -> str | None:
    if nn is None or not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return None
    attr = node.func.attr.value
    if code_of(node.func.value) == nn and attr[:1].isupper() and attr not in _CONTAINERS:
        return attr
    return None


def _layer_subclass(source: str, with_forward: bool) -> str | None:
    def make(prog):
        nn = prog.nn_alias()
        if nn is None:
            return None

        class Tr(cst.CSTTransformer):
            changed = 0
            made: dict = {}
            module_items: list = []

            def leave_Call(self, original, updated):
                attr = _layer_call(updated, nn)
                if attr is None:
                    return updated
                if attr not in self.made:
                    cname = prog.fresh(f"My{attr}")
                    self.made[attr] = cname
                    body = ("    def forward(self, x, *args, **kwargs):\n"
                            "        return super().forward(x, *args, **kwargs)\n") if with_forward else "    pass\n"
                    self.module_items.append(cst.parse_statement(f"class {cname}({nn}.{attr}):\n{body}"))
                self.changed += 1
                return updated.with_changes(func=cst.Name(self.made[attr]))

        return Tr()

    return rewrite_scope(source, make)


class LayerSubclass(Transform):
    """Use a trivial subclass of each layer run's code builds (``class MyLinear(nn.Linear): pass``)."""

    name = "layer_subclass"

    def apply(self, source):
        return _layer_subclass(source, False)


class LayerSubclassForward(Transform):
    """Use a subclass of each layer whose ``forward`` calls ``super().forward(x)``."""

    name = "layer_subclass_forward"

    def apply(self, source):
        return _layer_subclass(source, True)


def _block_rewriter(prog: Program, rewrite):
    """A transformer calling ``rewrite(stmt) -> list | None`` on every simple statement of a function body."""

    class Tr(cst.CSTTransformer):
        changed = 0
        module_items: list = []
        depth = 0

        def visit_FunctionDef(self, node):
            self.depth += 1

        def leave_FunctionDef(self, original, updated):
            self.depth -= 1
            return updated

        def leave_IndentedBlock(self, original, updated):
            if not self.depth:
                return updated
            body = []
            for stmt in updated.body:
                new = rewrite(self, stmt) if isinstance(stmt, cst.SimpleStatementLine) else None
                if new is None:
                    body.append(stmt)
                else:
                    self.changed += 1
                    body.extend(new)
            return updated.with_changes(body=body)

    return Tr()


def _sequential_from_list(source: str, stack: bool) -> str | None:
    prog = Program.of(source)
    if prog is None or prog.nn_alias() is None:
        return None
    nn = prog.nn_alias()
    stack_name = prog.fresh("LayerStack") if stack else None

    def make(p):
        def rewrite(tr, stmt):
            calls = [c for c in m.findall(stmt, m.Call()) if _is_call_of(c, nn, lambda a: a == "Sequential")
                     and c.args and all(a.keyword is None and not a.star for a in c.args)]
            if not calls:
                return None
            pre, mapping = [], {}
            for c in calls:
                name = prog.fresh("layers")
                items = cst.List([cst.Element(a.value) for a in c.args])
                pre.append(cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(name))], items)]))
                if stack:
                    mapping[c] = cst.Call(cst.Name(stack_name), [cst.Arg(cst.Name(name))])
                else:
                    mapping[c] = c.with_changes(args=[cst.Arg(cst.Name(name), star="*")])

            class Swap(cst.CSTTransformer):
                def leave_Call(self, original, updated):
                    return mapping.get(original, updated)

            new = bare(stmt).visit(Swap())
            comment = stmt.trailing_whitespace
            if has_marker(stmt):  # the culprit layer now sits in the list
                pre[-1] = pre[-1].with_changes(trailing_whitespace=comment)
                new = new.with_changes(trailing_whitespace=cst.TrailingWhitespace())
            return _lead(stmt, pre + [new])

        tr = _block_rewriter(p, rewrite)
        tr.module_items = [cst.parse_statement(_STACK.format(name=stack_name, nn=nn))] if stack else []
        return tr

    return rewrite_scope(source, make)


_STACK = '''class {name}({nn}.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = {nn}.ModuleList(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def __getitem__(self, i):
        return self.layers[i]
'''


class SequentialList(Transform):
    """Build each ``nn.Sequential(a, b)`` from a list: ``layers = [a, b]; nn.Sequential(*layers)``."""

    name = "sequential_list"

    def apply(self, source):
        return _sequential_from_list(source, stack=False)


class ModuleListStack(Transform):
    """Replace each ``nn.Sequential(a, b)`` by a module looping over ``nn.ModuleList(layers)`` in its forward."""

    name = "modulelist_stack"

    def apply(self, source):
        return _sequential_from_list(source, stack=True)


_HOLDER = '''class {block}({nn}.Module):
    def __init__(self, fc):
        super().__init__()
        self.fc = fc


class {enc}({nn}.Module):
    def __init__(self, fc):
        super().__init__()
        self.layers = {nn}.ModuleList([{block}(fc)])


class {holder}({nn}.Module):
    def __init__(self, fc):
        super().__init__()
        self.enc = {enc}(fc)
'''


class NestedModules(Transform):
    """Wrap each module built in a function in container modules and reach it as ``root.enc.layers[0].fc``."""

    name = "nested_modules"

    def apply(self, source):
        prog = Program.of(source)
        if prog is None or prog.nn_alias() is None:
            return None
        nn = prog.nn_alias()
        modclasses = prog.module_classes()
        names = {"block": prog.fresh("Block"), "enc": prog.fresh("Encoder"), "holder": prog.fresh("Model")}

        class Tr(cst.CSTTransformer):
            changed = 0
            module_items: list = []

            def leave_FunctionDef(self, original, updated):
                bound_count = Counter()
                for a in m.findall(updated, m.Assign()):
                    for t in a.targets:
                        for n in target_names(t.target):
                            bound_count[n] += 1
                params = set(param_names(updated.params))
                chosen = {}
                body = list(updated.body.body) if isinstance(updated.body, cst.IndentedBlock) else []
                for i, stmt in enumerate(body):
                    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
                            and isinstance(stmt.body[0], cst.Assign) and len(stmt.body[0].targets) == 1):
                        continue
                    a = stmt.body[0]
                    t = a.targets[0].target
                    if not isinstance(t, cst.Name) or bound_count[t.value] != 1 or t.value in params:
                        continue
                    v = a.value
                    ok = _layer_call(v, nn) is not None or _is_call_of(v, nn, lambda x: x == "Sequential") \
                        or (isinstance(v, cst.Call) and isinstance(v.func, cst.Name) and v.func.value in modclasses)
                    if not ok:
                        continue
                    root = prog.fresh(f"{t.value}_root")
                    chosen[t.value] = root
                    body[i] = stmt.with_changes(body=[a.with_changes(
                        targets=[a.targets[0].with_changes(target=cst.Name(root))],
                        value=cst.Call(cst.Name(names["holder"]), [cst.Arg(v)]))])
                if not chosen:
                    return updated

                class Use(cst.CSTTransformer):
                    def visit_Attribute(self, node):
                        return True

                    def leave_Attribute(self, original, updated):
                        return updated.with_changes(attr=original.attr)

                    def leave_Arg(self, original, updated):
                        return updated.with_changes(keyword=original.keyword)

                    def leave_Name(self, original, updated):
                        if original.value in chosen:
                            return cst.parse_expression(f"{chosen[original.value]}.enc.layers[0].fc")
                        return updated

                    def leave_Param(self, original, updated):
                        return original

                new_body = [s.visit(Use()) for s in body]
                self.changed += len(chosen)
                return updated.with_changes(body=updated.body.with_changes(body=new_body))

        def make(p):
            tr = Tr()
            tr.module_items = []
            return tr

        out = rewrite_scope(source, make)
        if out is None:
            return None
        module = cst.parse_module(out)
        return add_module_items(module, list(cst.parse_module(_HOLDER.format(nn=nn, **names)).body)).code


_METHOD_FORM = {"sigmoid", "tanh", "exp", "log", "relu", "abs", "sqrt", "sin", "cos", "softmax", "log_softmax",
                "clamp", "matmul", "mm", "bmm", "mul", "add", "sub", "div", "pow", "sum", "mean", "amax", "amin",
                "norm", "transpose", "unbind", "chunk", "split", "flatten", "reshape", "detach", "clone", "square",
                "logsumexp", "cumsum", "prod", "neg", "reciprocal", "rsqrt", "erf", "expm1", "log1p", "masked_fill",
                "where", "t", "diagonal", "narrow", "select", "squeeze", "unsqueeze", "exp_", "clamp_", "sigmoid_",
                "relu_", "tanh_", "mul_", "add_", "sub_", "div_", "zero_", "fill_"}


class MethodForm(Transform):
    """Write ``torch.op(x, ...)`` as the method call ``x.op(...)``."""

    name = "method_form"

    def apply(self, source):
        def make(prog):
            t = prog.torch_alias()
            if t is None:
                return None

            class Tr(cst.CSTTransformer):
                changed = 0

                def leave_Call(self, original, updated):
                    attr = _is_call_of(updated, t, lambda a: a in _METHOD_FORM and a != "where")
                    if attr is None or not updated.args or updated.args[0].keyword is not None \
                            or updated.args[0].star or any(a.keyword is not None and a.keyword.value == "out"
                                                           for a in updated.args):
                        return updated  # (the methods take no out=)
                    recv = updated.args[0].value
                    if not isinstance(recv, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
                        recv = recv.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()]) \
                            if not recv.lpar else recv
                    rest = list(updated.args[1:])
                    self.changed += 1
                    return updated.with_changes(func=cst.Attribute(recv, cst.Name(attr)), args=rest)

            return Tr()

        return rewrite_scope(source, make)


class RenameLocals(Transform):
    """Rename every local variable of run's code (parameters and attributes untouched)."""

    name = "rename_locals"

    def apply(self, source):
        prog = Program.of(source)
        if prog is None:
            return None

        class Tr(cst.CSTTransformer):
            changed = 0

            def leave_FunctionDef(self, original, updated):
                b = _Bound(original)
                original.visit(b)
                params = set(param_names(original.params))
                nested = {n.name.value for n in m.findall(original.body, m.FunctionDef() | m.ClassDef())}
                names = {n: prog.fresh(f"my_{n}") for n in sorted(b.names - params - nested)
                         if not n.startswith("__")}
                if not names:
                    return updated

                class R(cst.CSTTransformer):
                    def leave_Attribute(self, o, u):
                        return u.with_changes(attr=o.attr)

                    def leave_Arg(self, o, u):
                        return u.with_changes(keyword=o.keyword)

                    def leave_Param(self, o, u):
                        return o

                    def leave_ImportAlias(self, o, u):
                        return o

                    def leave_Name(self, o, u):
                        return u.with_changes(value=names[o.value]) if o.value in names else u

                self.changed += len(names)
                return updated.with_changes(body=updated.body.visit(R()))

        return rewrite_scope(source, lambda p: Tr())


class _SelfNames(cst.CSTTransformer):
    """Rewrite the names in ``names`` as ``self.<name>`` (not comprehension variables, attributes or keywords)."""

    def __init__(self, names: set[str], me: str = "self") -> None:
        super().__init__()
        self.names, self.me = names, me
        self.shadow: list[set[str]] = []

    def _push(self, node):
        bound = set()
        for comp in m.findall(node, m.CompFor()):
            bound.update(target_names(comp.target))
        self.shadow.append(bound)

    def _pop(self, original, updated):
        self.shadow.pop()
        return updated

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _push
    leave_ListComp = leave_SetComp = leave_DictComp = leave_GeneratorExp = _pop

    def leave_Attribute(self, original, updated):
        return updated.with_changes(attr=original.attr)

    def leave_Arg(self, original, updated):
        return updated.with_changes(keyword=original.keyword)

    def leave_Name(self, original, updated):
        if original.value in self.names and not any(original.value in s for s in self.shadow):
            return cst.Attribute(cst.Name(self.me), cst.Name(original.value))
        return updated


def _trains(node: cst.CSTNode) -> bool:
    return bool(m.findall(node, m.Call(func=m.Attribute(attr=m.Name("backward")))))


class TrainerClass(Transform):
    """Move run()'s training code into a plain ``class Trainer:`` (locals become ``self.x``; steps are methods)."""

    name = "trainer_class"

    def apply(self, source):
        prog = Program.of(source)
        if prog is None:
            return None
        run = prog.defs["run"]
        target = run if _trains(run) else None
        if target is None:  # run() delegates: the module-level function it calls that runs backward()
            for n in names_in(run):
                node = prog.defs.get(n)
                if isinstance(node, cst.FunctionDef) and n != "reference" and _trains(node):
                    target = node
                    break
        if target is None or not isinstance(target.body, cst.IndentedBlock):
            return None
        p = target.params
        if p.posonly_params or p.kwonly_params or isinstance(p.star_arg, cst.Param) or p.star_kwarg or target.decorators:
            return None
        body = list(target.body.body)
        doc = []
        if body and m.matches(body[0], m.SimpleStatementLine([m.Expr(m.SimpleString())])):
            doc = [body.pop(0)]
        if not body or not m.matches(body[-1], m.SimpleStatementLine([m.Return()])):
            return None
        ret = body.pop()
        if contains(cst.IndentedBlock(body=body), (cst.Return, cst.Yield, cst.Global, cst.Nonlocal, cst.NamedExpr,
                                                   cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return None
        local = function_locals(target)
        if "self" in local:
            return None
        params = param_names(p)

        def builds_only(stmt) -> bool:
            """Setup: no call of a local (a forward) nor of a local's method, except the parameter getters."""
            for call in m.findall(stmt, m.Call()):
                f = call.func
                if isinstance(f, cst.Name) and f.value in local and f.value not in params:
                    return False
                if isinstance(f, cst.Attribute) and f.attr.value not in ("parameters", "named_parameters", "to"):
                    root = f.value
                    while isinstance(root, (cst.Attribute, cst.Subscript, cst.Call)):
                        root = root.func if isinstance(root, cst.Call) else root.value
                    if isinstance(root, cst.Name) and root.value in local:
                        return False
            return True

        split = 0
        for stmt in body:
            if (isinstance(stmt, cst.SimpleStatementLine) and not has_marker(stmt) and not _trains(stmt)
                    and not looks_like_culprit(stmt) and not contains(stmt, (cst.AugAssign,)) and builds_only(stmt)):
                split += 1
            else:
                break
        setup, steps = body[:split], body[split:]
        if not steps:
            return None
        params = param_names(p)
        setup_bound = _Bound(target)
        cst.IndentedBlock(body=setup).visit(setup_bound)
        # attributes: the parameters, what the setup binds and what the result reads; loop variables and
        # temporaries of the steps stay local to train()
        comp_vars = {n for c in m.findall(ret, m.CompFor()) for n in target_names(c.target)}
        sn = _SelfNames((set(params) | setup_bound.names | (set(names_in(ret)) - comp_vars)) & local)
        cname, inst = prog.fresh("Trainer"), prog.fresh("trainer")
        init = [cst.parse_statement(f"self.{n} = {n}\n") for n in params] + [s.visit(sn) for s in setup]
        if not init:
            init = [cst.parse_statement("pass\n")]
        step_m = cst.parse_statement("def train(self):\n    pass\n")
        res_m = cst.parse_statement("def result(self):\n    pass\n")
        init_m = cst.parse_statement(f"def __init__({', '.join(['self'] + params)}):\n    pass\n")
        cls = cst.parse_statement(f"class {cname}:\n    pass\n")
        init_m = init_m.with_changes(body=init_m.body.with_changes(body=init))
        step_m = step_m.with_changes(body=step_m.body.with_changes(body=[s.visit(sn) for s in steps]),
                                     leading_lines=[cst.EmptyLine()])
        res_m = res_m.with_changes(body=res_m.body.with_changes(body=[bare(ret).visit(sn)]),
                                   leading_lines=[cst.EmptyLine()])
        cls = cls.with_changes(body=cls.body.with_changes(body=[init_m, step_m, res_m]))
        call = [cst.parse_statement(f"{inst} = {cname}({', '.join(params)})\n"),
                cst.parse_statement(f"{inst}.train()\n"), cst.parse_statement(f"return {inst}.result()\n")]
        new_fn = target.with_changes(body=target.body.with_changes(body=doc + call))
        mod_body = [new_fn if s is target else s for s in prog.module.body]
        i = mod_body.index(new_fn)
        mod_body[i:i] = [cls.with_changes(leading_lines=new_fn.leading_lines)]
        return prog.module.with_changes(body=mod_body).code


class Notebook(Transform):
    """Split the file into notebook cells (imports, each definition, each other statement) and analyse the .ipynb."""

    name = "notebook"
    kind = "ipynb"

    def apply(self, source):
        import nbformat

        prog = Program.of(source)
        if prog is None:
            return None
        module = prog.module
        cells = []
        body = list(module.body)
        if body and m.matches(body[0], m.SimpleStatementLine([m.Expr(m.SimpleString())])):
            doc = body.pop(0).body[0].value.evaluated_value
            cells.append(nbformat.v4.new_markdown_cell(str(doc).strip()))
        groups: list[list[cst.BaseStatement]] = []
        for stmt in body:
            is_import = isinstance(stmt, cst.SimpleStatementLine) and all(
                isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)
            if is_import and groups and getattr(groups[-1], "imports", False):
                groups[-1].append(stmt)
                continue
            g = _Group([stmt])
            g.imports = is_import
            groups.append(g)
        header = "".join(line.comment.value + "\n" for line in module.header if line.comment) if module.header else ""
        for gi, g in enumerate(groups):
            comments = [ln for ln in g[0].leading_lines if ln.comment is not None]
            text = cst.Module(body=[g[0].with_changes(leading_lines=comments)] + list(g[1:])).code
            if gi == 0 and not cells:
                text = header + text
            elif gi == 0:
                text = header + text
            cells.append(nbformat.v4.new_code_cell(text.rstrip("\n")))
        nb = nbformat.v4.new_notebook(cells=cells, metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"}})
        return nbformat.writes(nb)


class _Group(list):
    imports = False


# parameter names of common torch / torch.nn.functional / torch.nn callables (from their documented signatures)
_UNARY = ["input"]
_BINARY = ["input", "other"]
_SIGNATURES = {
    "torch": {**{n: _UNARY for n in ("sigmoid", "tanh", "exp", "log", "abs", "sqrt", "sin", "cos", "relu", "neg",
                                     "square", "rsqrt", "log1p", "expm1", "erf")},
              **{n: _BINARY for n in ("mul", "add", "sub", "div", "matmul", "maximum", "minimum")},
              "clamp": ["input", "min", "max"], "mm": ["input", "mat2"], "bmm": ["input", "mat2"],
              "softmax": ["input", "dim"], "log_softmax": ["input", "dim"], "logsumexp": ["input", "dim"],
              "pow": ["input", "exponent"], "cat": ["tensors", "dim"], "stack": ["tensors", "dim"],
              "masked_fill": ["input", "mask", "value"]},
    "functional": {"relu": ["input", "inplace"], "relu6": ["input", "inplace"], "silu": ["input", "inplace"],
                   "elu": ["input", "alpha", "inplace"], "leaky_relu": ["input", "negative_slope", "inplace"],
                   "dropout": ["input", "p", "training", "inplace"], "gelu": ["input"], "sigmoid": ["input"],
                   "linear": ["input", "weight", "bias"], "softmax": ["input", "dim"], "log_softmax": ["input", "dim"],
                   **{n: ["input", "target"] for n in ("mse_loss", "cross_entropy", "nll_loss", "smooth_l1_loss",
                                                         "l1_loss", "binary_cross_entropy",
                                                         "binary_cross_entropy_with_logits")},
                   "layer_norm": ["input", "normalized_shape"], "normalize": ["input", "p", "dim"]},
    "nn": {"Linear": ["in_features", "out_features"], "ReLU": ["inplace"], "ReLU6": ["inplace"],
           "SiLU": ["inplace"], "LeakyReLU": ["negative_slope", "inplace"], "Dropout": ["p", "inplace"],
           "ELU": ["alpha", "inplace"], "Conv2d": ["in_channels", "out_channels", "kernel_size"],
           "LayerNorm": ["normalized_shape"], "Embedding": ["num_embeddings", "embedding_dim"]},
}


class KeywordArgs(Transform):
    """Pass the arguments of common torch / F / nn calls by keyword (``torch.clamp(input=x, min=0.0)``)."""

    name = "keyword_args"

    def apply(self, source):
        def make(prog):
            bases = {}
            for key, alias in (("torch", prog.torch_alias()), ("functional", prog.functional_alias()),
                               ("nn", prog.nn_alias())):
                if alias:
                    bases[alias] = key
            t = prog.torch_alias()
            if t:
                bases.setdefault(f"{t}.nn.functional", "functional")
            if not bases:
                return None

            class Tr(cst.CSTTransformer):
                changed = 0

                def leave_Call(self, original, updated):
                    if not isinstance(updated.func, cst.Attribute):
                        return updated
                    table = _SIGNATURES.get(bases.get(code_of(updated.func.value), ""), {})
                    params = table.get(updated.func.attr.value)
                    positional = [a for a in updated.args if a.keyword is None]
                    if (not params or not positional or any(a.star for a in updated.args)
                            or len(positional) > len(params) or list(updated.args[:len(positional)]) != positional):
                        return updated
                    args = [a.with_changes(keyword=cst.Name(p), equal=cst.AssignEqual(
                        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
                        for a, p in zip(positional, params)] + list(updated.args[len(positional):])
                    self.changed += 1
                    return updated.with_changes(args=args)

            return Tr()

        return rewrite_scope(source, make)


ALL: list[Transform] = [
    HelperFunction(), ModuleMethod(), CallableClass(), Closure(), ContainerList(), ContainerDict(), ContainerIter(),
    AliasChain(), *WRAPPERS, ImportAlias(), StarParams(), PartialCall(),
    LambdaCall(), FromImport(), AutogradVariable(), LayerSubclass(), LayerSubclassForward(), SequentialList(),
    NestedModules(), MethodForm(), RenameLocals(), TrainerClass(), Notebook(), ModuleListStack(), KeywordArgs(),
]
BY_NAME = {t.name: t for t in ALL}
