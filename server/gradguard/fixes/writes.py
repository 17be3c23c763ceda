"""What an in-place write looks like in the code, and the libcst pieces the fixes rewrite it with.

``InPlaceWrite.of(ctx, node)`` reads the statement the engine reported (``x += y``, ``x.add_(y)``,
``x[i] = v``, ``torch.f(..., out=x)``, ``F.relu_(x)``, ``F.relu(x, inplace=True)``) into one shape:
the written expression, the name at its root (when the write goes through views of a local name), and
whether the in-place call's result is used.  The builders below produce the out-of-place forms.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..inference.sharing import Report
from ..knowledge import load_knowledge
from ..knowledge.names import OUT_OF_PLACE_METHODS, SEQUENCE_VIEWS, SHARING_ATTRS, VIEW_METHODS
from ..statements import chain_base, is_dotted
from .context import LIBCST_MAX_CHAIN, CannotFix, FixContext, too_long_for_libcst

if TYPE_CHECKING:  # pragma: no cover
    import libcst as cst

    from ..inference.events import Mutation
    from ..inference.sharing import Moment

_PRECEDENCE = {
    "BitOr": 1, "BitXor": 2, "BitAnd": 3, "LeftShift": 4, "RightShift": 4, "Add": 5, "Subtract": 5,
    "Multiply": 6, "MatrixMultiply": 6, "Divide": 6, "FloorDivide": 6, "Modulo": 6, "Power": 8,
}


@dataclass
class InPlaceWrite:
    """One in-place write, normalised."""

    stmt: ast.stmt
    kind: str  # "augassign", "setitem", "method", "out", "functional"
    target: ast.expr  # the expression whose memory is written
    call: ast.Call | None = None
    value_use: bool = False  # the in-place call's result is used (not a bare expression statement)
    # Where the run was at the write, and the frame of ``stmt`` (``Moment.frames``): what is read afterwards.
    moment: Moment | None = None
    depth: int = -1
    call_to_write: bool = False  # ``stmt`` is a caller's call on the way down to the write (``at_call``)

    @staticmethod
    def of_mutation(ctx: FixContext, mutation: Mutation) -> InPlaceWrite:
        """The write statement of the analysed function's story (``Mutation.entry``), with the run's facts."""
        entry = mutation.entry()
        write = InPlaceWrite.of(ctx, entry, mutation.written_through if entry is mutation.node else None)
        write.moment = mutation.moment
        write.depth = next((i for i, (site, _) in enumerate(mutation.frames) if site is entry), -1)
        return write

    @staticmethod
    def at_call(ctx: FixContext, call: ast.Call, moment: Moment | None) -> InPlaceWrite:
        """A caller's call that led to the write of ``moment``, asked as a write: who holds what it passes, and reads
        it after, as a run through it saw in the frame that made it (``Moment.through``: this analysis's runs or
        another's that reported the same write)."""
        run, depth = (moment.through(call) if moment is not None else None) or (None, -1)
        return InPlaceWrite(ctx.statement_of(call), "call", call, moment=run, depth=depth, call_to_write=True)

    def sharing(self, ctx: FixContext, name: str) -> Report:
        """Who else may see the memory ``name`` holds at the write, as the runs that made it show (``from_run``);
        with no run there (``UNSEEN``), anyone may."""
        if self.moment is not None and self.moment.holders is not None:
            return from_run(ctx, self.stmt, name, self.moment, self.depth, deeper=not self.call_to_write)
        return Report(name, ["?"], ["?"], [UNSEEN])

    def value_read_after(self, ctx: FixContext, name: str) -> bool:
        """Is ``name``'s value (not just its ``.grad`` or ``.shape``) read after the write, as the run went
        (a loop around both: also before it)?  With no run there, it may be."""
        return self.moment is None or self.moment.value_read_after(name, self.depth)

    @staticmethod
    def of(ctx: FixContext, node: ast.AST, through: ast.expr | None = None) -> InPlaceWrite:
        if isinstance(node, ast.AugAssign):
            return InPlaceWrite(node, "augassign", node.target)
        if isinstance(node, ast.Assign):
            # one target, or the one of a tuple's that the run wrote through (`q[:, 1:], k[:, 1:] = rotate(q, k)`)
            many = through is not None and isinstance(node.targets[0], (ast.Tuple, ast.List))
            written = [t for t in (node.targets[0].elts if many else node.targets) if isinstance(t, ast.Subscript)
                       and (not many or attribute_base(t) is through or root_name(t)[0] == getattr(through, "id", 0))]
            if len(node.targets) != 1 or len(written) != 1:
                raise CannotFix("an assignment with several targets")
            return InPlaceWrite(node, "setitem", written[0])
        if isinstance(node, ast.Call):
            stmt = ctx.statement_of(node)
            value_use = not (isinstance(stmt, ast.Expr) and stmt.value is node)
            out = next((k.value for k in node.keywords if k.arg == "out"), None)
            if out is not None:
                return InPlaceWrite(stmt, "out", out, node, value_use)
            func = node.func
            q = ctx.qual(func) or ""  # torch.add_(x, y), F.relu(x, inplace=True)
            if q.startswith("torch.") and (q.endswith("_") or any(k.arg == "inplace" for k in node.keywords)):
                if not node.args:
                    raise CannotFix("no input argument")
                return InPlaceWrite(stmt, "functional", node.args[0], node, value_use)
            if isinstance(func, ast.Attribute) and load_knowledge().is_inplace(func.attr):
                return InPlaceWrite(stmt, "method", func.value, node, value_use)
        raise CannotFix(f"unrecognised write {type(node).__name__}")


UNSEEN = "no run of the analysis went there"  # (``sharing``: what nothing ran cannot be told)
NONLOCAL_ESCAPE, NESTED_ESCAPE = "it is declared global or nonlocal", "a nested function or class uses it"


def param_escape(name: str) -> str:
    """``from_run``'s words for a parameter the caller holds (``sharing.Report.escapes``)."""
    return f"`{name}` is a parameter: the caller holds the same tensor"


def from_run(ctx: FixContext, write: ast.stmt, name: str, moment: Moment, depth: int, deeper: bool = True) -> Report:
    """What the runs of the write show (``Moment.seen``, where the memory escaped, the caller's hold through a
    parameter), with the scope's ``global``/``nonlocal`` names and closures' uses from its name index."""
    views, held, outside = moment.seen(name, depth, deeper)
    scope = ctx.scope_of(write)
    # A holder the tensor was read out of under any of its names (`x = xs[i]`, `h = self.buf; g = h`) is where it lives:
    # rebinding leaves it unwritten there, as for a view; one that is a parameter (`self`), the caller's: read after.
    sharers, index = {name, *(o for o, k in moment.held_in_any_run(depth) if k != "holder")}, ctx.names_in(scope)
    homes = {_read_out_of(ctx.parents.get(n)) for s in sharers for n in index.of(s) if isinstance(n.ctx, ast.Store)}
    views, held = [*views, *(h for h in held if h in homes)], [h for h in held if h not in homes]
    views, held = ([h for h in hs if not pieces_read_by_counter(ctx, write, h)] for hs in (views, held))
    params = index.arguments  # (a statement's scope is a function or the module, which has none)
    views += sorted({h for h, how in moment.held_in_any_run(depth) if how == "holder" and h in homes & params} - {*views})
    names = {name, *views, *held}
    declared = [d for d in index.declarations if names & d]
    nested = any(ctx.once(f"used in nested code: {n}", scope, lambda n=n: any(
        ctx.definitions_between(use, scope) for use in index.of(n))) for n in names)
    escapes = [*map(_escape_words, moment.escape_sites()),
               *map(param_escape, moment.callers_pass(depth)), *(NONLOCAL_ESCAPE for _ in declared),
               *([NESTED_ESCAPE] if nested else []),
               *(f"`{other}` holds it outside this function" for other in outside if not (other == name and declared))]
    return Report(name, views, held, escapes)


def pieces_read_by_counter(ctx: FixContext, stmt: ast.stmt, holder: str) -> bool:
    """``holder`` is bound once, before the one loop around the write ``stmt`` (``for i in range(...)``), to the pieces
    of a tensor (``split``, ``chunk``...), or a comprehension of a tensor method on each, and read only as ``holder[i]``
    in the loop, not after ``stmt`` (but in the other branch of an ``if``): each iteration reads another piece than any
    an earlier one bound (each its own memory), so rebinding a name instead of writing changes nothing it reads."""
    scope, loops, uses = ctx.scope_of(stmt), ctx.loops_around(stmt), ctx.names_in(ctx.scope_of(stmt)).of(holder)
    stores = [n for n in uses if not isinstance(n.ctx, ast.Load)]
    binding, loop = ctx.parents.get(stores[0]) if len(stores) == 1 else None, loops[0] if len(loops) == 1 else None
    value = binding.value if isinstance(binding, ast.Assign) and binding.targets == stores else None
    if isinstance(value, ast.ListComp) and len(value.generators) == 1 and not value.generators[0].ifs:
        base, (target, value) = value.elt, (value.generators[0].target, value.generators[0].iter)
        while isinstance(base, (ast.Subscript, ast.Attribute, ast.Call)):  # `p.squeeze(1)`: a method of the piece
            base = base.func if isinstance(base, ast.Call) else base.value
        value = value if isinstance(base, ast.Name) and isinstance(target, ast.Name) and base.id == target.id else None
    counter = loop.target.id if isinstance(loop, ast.For) and isinstance(loop.target, ast.Name) else None
    q = (ctx.qual(value.func) or "") if isinstance(value, ast.Call) else "?"  # `x.split(2)`, `torch.chunk`, `split`
    return counter is not None and ((q or "torch.").startswith("torch.") and getattr(value.func, "attr", None) in
                                    SEQUENCE_VIEWS or q.removeprefix("torch.") in SEQUENCE_VIEWS) \
        and starts_after(loop, binding) and isinstance(loop.iter, ast.Call) and ctx.qual(loop.iter.func) == "builtins.range" \
        and not any(isinstance(n.ctx, ast.Store) for n in ctx.names_in(ctx.tree).of("range")) \
        and not any(isinstance(n.ctx, ast.Store) and n is not loop.target for n in ctx.names_in(scope).of(counter)) \
        and all(isinstance(sub := ctx.parents.get(n), ast.Subscript) and sub.value is n and ctx.inside(n, loop)
                and isinstance(sub.slice, ast.Name) and sub.slice.id == counter and ctx.scope_of(n) is scope
                and not (starts_after(n, stmt) and not ctx.inside(n, stmt) and not any(
                    isinstance(br, ast.If) and ctx.inside(n, br) and not any(ctx.inside(n, s) for s in br.body)
                    and any(ctx.inside(stmt, s) for s in br.body) for br in ctx.ancestors(stmt)))
                for n in uses if n is not stores[0])


def starts_after(node: ast.AST, stmt: ast.stmt) -> bool:
    return (node.lineno, node.col_offset) >= (stmt.lineno, stmt.col_offset)


def _read_out_of(binding: ast.AST | None) -> str | None:
    node = chain_base(binding.value) if isinstance(binding, ast.Assign) and len(binding.targets) == 1 else None
    return node.id if isinstance(node, ast.Name) else None


def _escape_words(site: ast.AST) -> str:
    """What the run saw the memory handed to (``RunLog.escaped``): a call it cannot see into, or a store."""
    if isinstance(site, ast.Call):
        return f"it is passed to `{ast.unparse(site.func)}`"
    stored = next((t for t in getattr(site, "targets", [getattr(site, "target", None)])
                   if isinstance(t, (ast.Attribute, ast.Subscript))), None)
    return f"it is stored into `{ast.unparse(stored)}`" if stored is not None else "it goes where the run cannot see"


def through_views(expr: ast.expr) -> Iterator[ast.expr]:
    """``expr`` and what it is a view of, outwards: ``x.view(-1)[0]``, ``x.view(-1)``, ``x``."""
    node = expr
    while True:
        yield node
        if isinstance(node, ast.Subscript) or isinstance(node, ast.Attribute) and node.attr in SHARING_ATTRS:
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in VIEW_METHODS:
            node = node.func.value
        else:
            return


def root_name(expr: ast.expr) -> tuple[str | None, bool]:
    """(name, direct): the local name the written expression is, or is a view of (``x``, ``x[0]``, ``x.T``,
    ``x.view(-1)[0]``); direct when the expression is the name itself.  (None, False) otherwise."""
    if isinstance(expr, ast.Name):
        return expr.id, True
    *_, root = through_views(expr)
    return (root.id, False) if isinstance(root, ast.Name) else (None, False)


def attribute_base(expr: ast.expr) -> ast.Attribute | None:
    """The attribute chain (``self.weight``, ``model.fc.weight``) the written expression is, or is a view of."""
    return next((node for node in through_views(expr) if isinstance(node, ast.Attribute)
                 and node.attr not in SHARING_ATTRS and is_dotted(node)), None)


# ----------------------------------------------------------------------------- libcst builders
def cst_mod():
    import libcst

    return libcst


def parse_expr(code: str) -> cst.BaseExpression:
    """``code`` (an expression, often the source of a node of the file) as a libcst expression; CannotFix for an
    ``and``/``or`` chain libcst's parser would crash on (``context.too_long_for_libcst``)."""
    if code.count(" and ") + code.count(" or ") > LIBCST_MAX_CHAIN:
        try:
            tree = ast.parse(code.strip(), mode="eval")
        except (SyntaxError, RecursionError, MemoryError, ValueError):
            raise CannotFix("an expression too long to rewrite") from None
        if too_long_for_libcst(tree):
            raise CannotFix("an `and`/`or` chain too long to rewrite")
    return cst_mod().parse_expression(code)


def is_atom(node: cst.BaseExpression) -> bool:
    cst = cst_mod()
    atoms = (
        cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString,
        cst.ConcatenatedString, cst.FormattedString, cst.List, cst.Dict, cst.Set, cst.ListComp, cst.SetComp,
        cst.DictComp, cst.GeneratorExp, cst.Ellipsis,
    )
    return bool(getattr(node, "lpar", ())) or isinstance(node, atoms)


def paren(node: cst.BaseExpression) -> cst.BaseExpression:
    cst = cst_mod()
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def as_operand(node: cst.BaseExpression, op: str, right: bool) -> cst.BaseExpression:
    """``node`` as an operand of binary ``op``, parenthesized unless that is unnecessary."""
    cst = cst_mod()
    if is_atom(node):
        return node
    if isinstance(node, cst.UnaryOperation) and not isinstance(node.operator, cst.Not):
        return node if (right or op != "Power") else paren(node)
    if isinstance(node, cst.BinaryOperation):
        inner = _PRECEDENCE.get(type(node.operator).__name__, 0)
        outer = _PRECEDENCE.get(op, 0)
        if inner > outer or (inner == outer and not right and op != "Power"):
            return node
    return paren(node)


def receiver(node: cst.BaseExpression) -> cst.BaseExpression:
    """``node`` as the object of an attribute access (``(a * b).clone()``)."""
    cst = cst_mod()
    if is_atom(node) and not isinstance(node, (cst.Integer, cst.Float, cst.Imaginary)):
        return node
    return paren(node)


def clone_of(node: cst.BaseExpression) -> cst.Call:
    cst = cst_mod()
    return cst.Call(func=cst.Attribute(value=receiver(node), attr=cst.Name("clone")))


def assign(target: cst.BaseExpression, value: cst.BaseExpression, *more: cst.BaseExpression,
           like: cst.AugAssign | None = None) -> cst.Assign:
    """``target = value`` (``like``: keep the spacing around an augmented assignment's operator)."""
    cst = cst_mod()
    spacing = {}
    if like is not None:
        spacing = {"whitespace_before_equal": like.operator.whitespace_before,
                   "whitespace_after_equal": like.operator.whitespace_after}
    return cst.Assign(targets=[cst.AssignTarget(target=t, **spacing) for t in (target, *more)], value=value)


def aug_to_binop(aug: cst.AugAssign) -> cst.BinaryOperation:
    """``x op= v`` -> ``x op v`` (with ``v`` parenthesized when needed); libcst names each ``op=`` ``<op>Assign``."""
    cst = cst_mod()
    name = type(aug.operator).__name__.removesuffix("Assign")
    return cst.BinaryOperation(
        left=as_operand(aug.target.deep_clone(), name, right=False),
        operator=getattr(cst, name)(),
        right=as_operand(aug.value, name, right=True),
    )


def without_keyword(call: cst.Call, keyword: str) -> cst.Call:
    """The call without its ``keyword=`` argument (commas kept right)."""
    args = list(call.args)
    index = next((i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value == keyword), None)
    if index is None:
        return call
    removed = args.pop(index)
    if args and index == len(args):  # removed the last one: the new last takes its comma (or none)
        args[-1] = args[-1].with_changes(comma=removed.comma)
    return call.with_changes(args=args)


def out_of_place(ctx: FixContext, call: ast.Call, obj: cst.BaseExpression | None = None) -> cst.BaseExpression:
    """``obj.m_(args)`` -> its out-of-place form: ``obj.m(args)``, ``torch.zeros_like(obj)``,
    ``torch.full_like(obj, v)``, or ``obj.clone().m_(args)``.  ``obj`` replaces the receiver when given."""
    cst = cst_mod()
    node = ctx.cst(call)
    func = node.func
    if not isinstance(func, cst.Attribute):
        raise CannotFix("not a method call")
    method = func.attr.value
    obj = obj if obj is not None else func.value
    twin = method[:-1]
    torch = ctx.torch_name()
    if twin in OUT_OF_PLACE_METHODS:
        return node.with_changes(func=func.with_changes(value=receiver(obj), attr=cst.Name(twin)))
    if method == "zero_" and torch and not call.args and not call.keywords:
        return cst.Call(func=parse_expr(f"{torch}.zeros_like"), args=[cst.Arg(obj.deep_clone())])
    if method == "fill_" and torch and len(call.args) == 1 and not call.keywords and _is_number(call.args[0]):
        return cst.Call(
            func=parse_expr(f"{torch}.full_like"),
            args=[cst.Arg(obj.deep_clone(), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), node.args[0].with_changes(comma=cst.MaybeSentinel.DEFAULT)],
        )
    return node.with_changes(func=func.with_changes(value=clone_of(obj)))


def _is_number(node: ast.AST) -> bool:
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def code(node: cst.CSTNode) -> str:
    cst = cst_mod()
    return cst.Module(body=[]).code_for_node(node)


def short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
