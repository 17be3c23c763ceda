"""GG104's own rewrite: a loop that fills a preallocated tensor step by step collects the steps in a list and
stacks them after the loop.

    buf = torch.zeros(T, H)            buf_steps = []
    buf[0] = f(x[0])                   buf_steps.append(f(x[0]))
    for t in range(1, T):      ->      for t in range(1, T):
        buf[t] = g(buf[t - 1], x[t])       buf_steps.append(g(buf_steps[t - 1], x[t]))
    use(buf)                           buf = torch.stack(buf_steps)
                                       use(buf)

Only this shape, where the two programs compute the same rows: every row of the buffer is written, in order,
exactly once (the writes before the loop are rows 0..a-1, the loop runs ``range(a, T)`` with ``T`` spelled as the
buffer's first dimension), and every other use of the buffer until the loop ends reads an earlier row
(``buf[t - c]``, ``1 <= c <= a``), which the list holds at the same index.  Always unsafe: the stacked tensor has
the dtype and shape of the values written, where the buffer converted and broadcast them to its own (and a buffer
made with ``requires_grad=True`` was a leaf whose ``.grad`` torch filled; the stack's is not).
"""

from __future__ import annotations

import ast

from ..diagnostics import Fix, TextEdit
from ..statements import block_of
from .context import FUNCTIONS, CannotFix, FixContext

_FACTORIES = {"torch.zeros", "torch.ones", "torch.empty"}
_LIKE_FACTORIES = {"torch.zeros_like", "torch.ones_like", "torch.empty_like"}
_KNOWN_KEYWORDS = {"requires_grad", "dtype", "device"}


def stack_steps(ctx: FixContext, write: ast.stmt) -> Fix:
    """The list + ``torch.stack`` rewrite of the loop around ``write`` (``buf[t] = value``); CannotFix unless the
    shape above is proven."""
    if not (isinstance(write, ast.Assign) and len(write.targets) == 1 and isinstance(write.targets[0], ast.Subscript)):
        raise CannotFix("not an indexed assignment")
    target = write.targets[0]
    if not isinstance(target.value, ast.Name) or not isinstance(target.slice, ast.Name):
        raise CannotFix("not `name[t] = ...`")
    buf, t = target.value.id, target.slice.id
    loop = ctx.parents.get(write)
    if not (isinstance(loop, ast.For) and any(s is write for s in loop.body)):
        raise CannotFix("the write is not a statement of the loop's body")
    if not (isinstance(loop.target, ast.Name) and loop.target.id == t) or loop.orelse:
        raise CannotFix("the loop does not run over the written index")
    start, stop = _range(loop.iter)
    block = _block_of(ctx, loop)
    scope = ctx.scope_of(loop)
    if not isinstance(scope, FUNCTIONS) or _declared_outside(scope, buf):
        raise CannotFix("the buffer is not a local of a function")
    index = next(i for i, s in enumerate(block) if s is loop)
    alloc_at = next((i for i in range(index - 1, -1, -1) if _binds(block[i], buf)), None)
    if alloc_at is None:
        raise CannotFix("the buffer is not made in the loop's block")
    alloc = block[alloc_at]
    rows, unsafe = _allocation(ctx, alloc, buf)
    firsts = []
    for stmt in block[alloc_at + 1:index]:
        if not _mentions(stmt, buf):
            continue
        if _row_write(stmt, buf) != len(firsts) or _mentions(stmt.value, buf):
            raise CannotFix("the buffer is used between its allocation and the loop")
        firsts.append(stmt)
    if start != len(firsts) or not _same_size(ctx, stop, rows):
        raise CannotFix("the writes do not cover every row of the buffer exactly once, in order")
    _require_reads_of_earlier_rows(loop, write, buf, t, len(firsts))
    if _mentions(loop.iter, buf) or any(isinstance(n, (ast.Break, ast.Continue)) for n in ast.walk(loop)):
        raise CannotFix("the loop can stop early or reads the buffer in its header")
    if any(isinstance(n, (*FUNCTIONS, ast.Lambda, ast.ClassDef)) and n is not scope and _mentions(n, buf)
           for n in ast.walk(scope)):
        raise CannotFix("a nested function uses the buffer")

    torch = ctx.torch_name()
    if torch is None:
        raise CannotFix("`torch` is not imported by that name")
    steps = _fresh_name(scope, f"{buf}_steps")
    for stmt in (alloc, *firsts, write, loop):
        ctx.require_own_lines(stmt)
    nl = ctx.newline
    edits = [_replace_statement(ctx, alloc, f"{steps} = []")]
    for stmt in firsts:
        edits.append(_replace_statement(ctx, stmt, f"{steps}.append({ctx.source(stmt.value)})"))
    edits.append(_replace_statement(ctx, write, f"{steps}.append({_renamed(ctx, write.value, buf, steps)})"))
    after = loop.end_lineno + 1
    edits.append(TextEdit(after, 1, after, 1, f"{ctx.indent_of(loop)}{buf} = {torch}.stack({steps}){nl}"))
    edits.sort(key=lambda e: (e.line, e.column))
    why = "`{0}` becomes the stack of the values written, with their dtype and shape (the buffer converted and " \
          "broadcast them to its own)".format(buf)
    if unsafe:
        why += f"; {unsafe}"
    return Fix(f"Collect the steps in a list `{steps}` and `{torch}.stack` them after the loop (unsafe: {why})",
               False, tuple(edits))


def _range(it: ast.expr) -> tuple[int, ast.expr]:
    """``range(T)`` / ``range(a, T)`` with a literal ``a``: (a, T)."""
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and not it.keywords):
        raise CannotFix("the loop is not over `range(...)`")
    if len(it.args) == 1:
        return 0, it.args[0]
    if len(it.args) == 2 and isinstance(it.args[0], ast.Constant) and type(it.args[0].value) is int:
        return it.args[0].value, it.args[1]
    raise CannotFix("the range has a step or a start that is not a literal")


def _block_of(ctx: FixContext, stmt: ast.stmt) -> list[ast.stmt]:
    block = block_of(ctx.parents.get(stmt), stmt)
    if block is None:
        raise CannotFix("the loop is not in a plain block")
    return block


def _declared_outside(scope: ast.AST, name: str) -> bool:
    return any(isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names for n in ast.walk(scope))


def _binds(stmt: ast.stmt, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in ast.walk(stmt))


def _mentions(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


def _allocation(ctx: FixContext, stmt: ast.stmt, buf: str) -> tuple[tuple[str, ...], str]:
    """The spellings of the buffer's row count, and what else the rewrite changes (for the title)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Call)):
        raise CannotFix("the buffer is not made by a factory call")
    call = stmt.value
    name = ctx.qual(call.func)
    if any(k.arg not in _KNOWN_KEYWORDS for k in call.keywords):
        raise CannotFix("the factory has keywords the rewrite does not know")
    unsafe = ""
    if any(k.arg == "requires_grad" for k in call.keywords):
        unsafe = f"`{buf}` is no longer a leaf, so `{buf}.grad` stays None"
    if name in _FACTORIES and call.args:
        first = call.args[0]
        if isinstance(first, (ast.Tuple, ast.List)) and len(call.args) == 1 and first.elts:
            first = first.elts[0]
        if isinstance(first, ast.Starred):
            raise CannotFix("the buffer's size is unpacked")
        return (_norm(ctx.source(first)),), unsafe
    if name in _LIKE_FACTORIES and len(call.args) == 1 and isinstance(call.args[0], ast.Name):
        x = call.args[0].id
        return (f"{x}.shape[0]", f"len({x})", f"{x}.size(0)", f"{x}.size()[0]"), unsafe
    raise CannotFix("the buffer is not made by torch.zeros/ones/empty(_like)")


def _norm(text: str) -> str:
    return "".join(text.split())


def _same_size(ctx: FixContext, stop: ast.expr, rows: tuple[str, ...]) -> bool:
    return _norm(ctx.source(stop)) in {_norm(r) for r in rows}


def _row_write(stmt: ast.stmt, buf: str) -> int | None:
    """``buf[k] = ...`` with a literal ``k``: k."""
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript)
            and isinstance(stmt.targets[0].value, ast.Name) and stmt.targets[0].value.id == buf):
        index = stmt.targets[0].slice
        if isinstance(index, ast.Constant) and type(index.value) is int:
            return index.value
    return None


def _require_reads_of_earlier_rows(loop: ast.For, write: ast.Assign, buf: str, t: str, written_before: int) -> None:
    """Every use of ``buf`` in the loop is the write's target or a read ``buf[t - c]`` of a row the list holds;
    ``t`` is never rebound."""
    allowed = {id(write.targets[0].value)}
    for node in ast.walk(loop):
        if isinstance(node, ast.Name) and node.id == t and isinstance(node.ctx, ast.Store) and node is not loop.target:
            raise CannotFix("the loop variable is rebound in the loop")
        if not isinstance(node, ast.Subscript) or not isinstance(node.value, ast.Name) or node.value.id != buf:
            continue
        if node is write.targets[0]:
            continue
        index = node.slice
        if (isinstance(node.ctx, ast.Load) and isinstance(index, ast.BinOp) and isinstance(index.op, ast.Sub)
                and isinstance(index.left, ast.Name) and index.left.id == t and isinstance(index.right, ast.Constant)
                and type(index.right.value) is int and 1 <= index.right.value <= written_before):
            allowed.add(id(node.value))
        else:
            raise CannotFix("the loop uses the buffer other than reading an earlier row")
    for node in ast.walk(loop):
        if isinstance(node, ast.Name) and node.id == buf and id(node) not in allowed:
            raise CannotFix("the loop uses the buffer other than reading an earlier row")


def _fresh_name(scope: ast.AST, base: str) -> str:
    used = {n.id for n in ast.walk(scope) if isinstance(n, ast.Name)} | {
        a.arg for a in ast.walk(scope) if isinstance(a, ast.arg)}
    name, k = base, 2
    while name in used:
        name, k = f"{base}{k}", k + 1
    return name


def _replace_statement(ctx: FixContext, stmt: ast.stmt, code: str) -> TextEdit:
    """``stmt``'s text (not its comment) replaced by ``code``."""
    line, column, end_line, end_column = ctx.char_range(stmt)  # 0-based columns; edits count from 1
    return TextEdit(line, column + 1, end_line, end_column + 1, code)


def _renamed(ctx: FixContext, expr: ast.expr, old: str, new: str) -> str:
    """The source of ``expr`` with every ``old`` name spelled ``new``."""
    text = ctx.source(expr)
    line, column, _, _ = ctx.char_range(expr)
    names = sorted((n for n in ast.walk(expr) if isinstance(n, ast.Name) and n.id == old),
                   key=lambda n: (n.lineno, n.col_offset), reverse=True)
    lines = text.split("\n")
    for n in names:
        nl, nc, _, nec = ctx.char_range(n)
        row = nl - line
        offset = nc - (column if row == 0 else 0)
        end = offset + (nec - nc)
        lines[row] = lines[row][:offset] + new + lines[row][end:]
    return "\n".join(lines)
