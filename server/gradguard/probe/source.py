"""The expression the user wrote at a site, for the probe's messages.  No torch.

torch reports ops by their aten names (``addcdiv_``, ``index_put_``, ``copy_``); the user wrote
``optimizer.step()``, ``h.data[pad] = 0`` or ``self.drop(h)``.  A site carries the column range of the
instruction that was running (``frames.code_site``), so the smallest call around that range is what the
user wrote; a write through an assignment target (``x[:, 0] = ...``, ``h += 1``) is the whole statement.
"""

from __future__ import annotations

import ast
import linecache
import re

from ..statements import blocks
from .model import Site

MAX_CHARS = 60
_TREES: dict[str, ast.Module | None] = {}
_OPERATIONS = (ast.BinOp, ast.UnaryOp, ast.Compare, ast.Subscript, ast.BoolOp, ast.IfExp)
_STATEMENTS_SHOWN_WHOLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return, ast.Delete)


def _tree(path: str) -> ast.Module | None:
    if path not in _TREES:
        text = "".join(linecache.getlines(path))
        try:
            _TREES[path] = ast.parse(text) if text else None
        except (SyntaxError, ValueError):
            _TREES[path] = None
    return _TREES[path]


def _covers(node: ast.AST, start: tuple[int, int], end: tuple[int, int]) -> bool:
    end_line = getattr(node, "end_lineno", None)
    if end_line is None:
        return False
    return (node.lineno, node.col_offset) <= start and (end_line, node.end_col_offset) >= end


def _segment(path: str, node: ast.AST) -> str:
    lines = linecache.getlines(path)[node.lineno - 1:node.end_lineno]
    if not lines:
        return ""
    # ast offsets count UTF-8 bytes, as co_positions do.
    data = [line.encode("utf-8") for line in lines]
    if len(data) == 1:
        text = data[0][node.col_offset:node.end_col_offset]
    else:
        text = data[0][node.col_offset:] + b"".join(data[1:-1]) + data[-1][:node.end_col_offset]
    return text.decode("utf-8", "replace")


def shorten(text: str) -> str:
    """One line, at most ``MAX_CHARS`` characters (an ellipsis marks the cut)."""
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS - 1].rstrip() + "…"


def expression_at(site: Site | None) -> str | None:
    """The call or statement the user wrote at ``site``, shortened; None when the source is unknown."""
    if site is None or not site.line:
        return None
    tree = _tree(site.path)
    if tree is None:
        text = linecache.getline(site.path, site.line).strip()
        return shorten(text) if text else None
    statement = None
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and node.lineno <= site.line <= (node.end_lineno or node.lineno):
            if statement is None or _span(node) <= _span(statement):
                statement = node
    if statement is None:
        text = linecache.getline(site.path, site.line).strip()
        return shorten(text) if text else None
    chosen = None
    if site.column:
        start = (site.line, site.column - 1)
        end = (site.end_line or site.line, site.end_column - 1 if site.end_column else site.column - 1)
        chosen = _smallest(statement, start, end, ast.Call)
        if chosen is None and any(_covers(t, start, end) or _covers_start(t, start)
                                  for t in _assignment_targets(statement)):
            chosen = statement  # `x[:, 0] = v`, `h += 1`: the write is the statement
        if chosen is None:
            chosen = _smallest(statement, start, end, _OPERATIONS)  # `z @ w.t()`, `-h`, `h[idx]`
    if chosen is None:
        if isinstance(statement, _STATEMENTS_SHOWN_WHOLE) or statement.lineno == statement.end_lineno:
            chosen = statement
        else:
            text = linecache.getline(site.path, site.line).strip().rstrip(":")
            return shorten(text) if text else None
    return shorten(_segment(site.path, chosen)) or None


def attribute_at(site: Site | None, name: str) -> str | None:
    """``x.name`` as written at ``site`` (an attribute read such as ``h.data`` is no call); None when not there."""
    if site is None or not site.column or _tree(site.path) is None:
        return None
    start = (site.line, site.column - 1)
    end = (site.end_line or site.line, site.end_column - 1 if site.end_column else site.column - 1)
    found = [node for node in ast.walk(_tree(site.path))
             if isinstance(node, ast.Attribute) and node.attr == name and _covers(node, start, end)]
    chosen = min(found, key=_span, default=None)
    return shorten(_segment(site.path, chosen)) if chosen is not None else None


def _smallest(statement: ast.stmt, start, end, kinds) -> ast.AST | None:
    chosen = None
    for node in ast.walk(statement):
        if isinstance(node, kinds) and _covers(node, start, end):
            if chosen is None or _span(node) <= _span(chosen):
                chosen = node
    return chosen


def _covers_start(node: ast.AST, start: tuple[int, int]) -> bool:
    return getattr(node, "end_lineno", None) is not None and _covers(node, start, start)


def _assignment_targets(statement: ast.stmt) -> list[ast.AST]:
    if isinstance(statement, ast.Assign):
        return list(statement.targets)
    if isinstance(statement, (ast.AugAssign, ast.AnnAssign)):
        return [statement.target]
    return []


def _span(node: ast.AST) -> tuple[int, int]:
    end_line = node.end_lineno or node.lineno
    if end_line == node.lineno:
        return (0, (node.end_col_offset or 0) - node.col_offset)
    return (end_line - node.lineno, 0)


def function_node(path: str, first_line: int, name: str) -> "ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | None":
    """The ``def`` (or ``lambda``) whose code object starts at ``first_line`` (``co_firstlineno``: a decorated
    function's first decorator), or None when the source is not available."""
    tree = _tree(path)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            if start == first_line:
                return node
        elif isinstance(node, ast.Lambda) and name == "<lambda>" and node.lineno == first_line:
            return node
    return None


def enclosing_function(site: Site) -> tuple[str, int] | None:
    """(name, first line) of the innermost ``def`` around ``site``; ("<module>", 0) at module level; None when
    the source is not available."""
    tree = _tree(site.path)
    if tree is None:
        return None
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and \
                node.lineno <= site.line <= (node.end_lineno or node.lineno):
            if best is None or node.lineno >= best.lineno:
                best = node
    if best is None:
        return ("<module>", 0)
    return (getattr(best, "name", "<lambda>"), best.lineno)


def rebinding_before(site: Site) -> Site | None:
    """For a write at ``site`` to a plain name (``x -= m``, ``x.sub_(m)``, ``x[i] = v``): the latest assignment
    ``x = <call>`` before it in the same function, when that call is made on ``x``'s own value (``x = x.float()``,
    ``x = x.to(dtype)``, ``x = x.contiguous()``).  None when the name is not rebound that way."""
    found = _function_and_name(site)
    if found is None:
        return None
    function, name = found
    best = _latest_assignment(function, name, site, lambda value: (
        isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
        and isinstance(value.func.value, ast.Name) and value.func.value.id == name))
    return _unless_rebound(function, name, best, site)


def alias_before(site: Site) -> Site | None:
    """For a write at ``site`` to a plain name (``out[:, :h] = v``, ``out += v``): the latest assignment
    ``out = x`` before it in the same function when it merely gives another name to a tensor (a plain name on
    the right), so that the write changes ``x`` too.  None otherwise."""
    found = _function_and_name(site)
    if found is None:
        return None
    function, name = found
    best = _latest_assignment(function, name, site, lambda value: isinstance(value, ast.Name) and value.id != name)
    if best is None:
        return None
    return _unless_rebound(function, name, best, site, whole=True)


# Tensor methods and attributes whose result is a view of the tensor they are called on (one view: not split/chunk).
_VIEW_METHODS = frozenset(("view", "view_as", "reshape", "reshape_as", "t", "transpose", "permute", "unsqueeze",
                           "squeeze", "expand", "expand_as", "narrow", "select", "unflatten", "flatten", "swapaxes",
                           "swapdims", "movedim", "diagonal", "as_strided", "unfold"))
_VIEW_ATTRIBUTES = frozenset(("T", "mT", "H", "mH"))


def _is_view_expression(value) -> bool:
    if isinstance(value, ast.Subscript):
        return True
    if isinstance(value, ast.Attribute):
        return value.attr in _VIEW_ATTRIBUTES
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _VIEW_METHODS


def view_before(site: Site) -> tuple[Site, str] | None:
    """For a write at ``site`` to a plain name (``b[:, 4] += v``, ``b.add_(v)``): the latest assignment
    ``b = <view of something>`` before it in the same function (``b = m.bias.view(n, -1)``, ``b = w[:, :k]``,
    ``b = w.T``), where the view the write goes through is taken, and the name.  None otherwise."""
    found = _function_and_name(site)
    if found is None:
        return None
    function, name = found
    best = _latest_assignment(function, name, site, _is_view_expression)
    view = _unless_rebound(function, name, best, site, whole=True)
    return (view, name) if view is not None else None


def iterated_at(site: Site) -> str | None:
    """For a ``for`` loop whose header is at ``site``: the iterated expression as written (``batch`` in ``for img in
    batch:``); None otherwise."""
    tree = _tree(site.path)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor)) and node.lineno == site.line:
            return shorten(_segment(site.path, node.iter)) or None
    return None


def _innermost(tree: ast.AST, line: int, kinds: tuple[type, ...]) -> ast.AST | None:
    """The innermost node of one of ``kinds`` whose lines hold ``line`` (the one that starts last)."""
    found = None
    for node in ast.walk(tree):
        if isinstance(node, kinds) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if found is None or node.lineno >= found.lineno:
                found = node
    return found


def _innermost_statement(tree: ast.AST, line: int) -> ast.stmt | None:
    """The shortest statement whose lines hold ``line``."""
    found = None
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if found is None or _span(node) <= _span(found):
                found = node
    return found


def attribute_assigned(site: Site) -> tuple[str, str] | None:
    """``(name, attr)`` when the statement at ``site`` is ``name.attr = value`` (one target), else None."""
    tree = _tree(site.path)
    statement = _innermost_statement(tree, site.line) if tree is not None else None
    if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
        return None
    target = statement.targets[0]
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
        return target.value.id, target.attr
    return None


def accumulates(site: Site) -> bool:
    """Whether the statement at ``site`` folds a new value into a name it reads (``total += loss``,
    ``ema = 0.9 * ema + 0.1 * out``): a running value meant to span calls or steps."""
    tree = _tree(site.path)
    statement = _innermost_statement(tree, site.line) if tree is not None else None
    if isinstance(statement, ast.AugAssign):
        return True
    if not isinstance(statement, ast.Assign):
        return False
    stored = {ast.dump(node) for target in statement.targets for node in ast.walk(target)
              if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Store)}
    for node in ast.walk(statement.value):
        if isinstance(node, ast.Name):
            if ast.dump(ast.Name(node.id, ast.Store())) in stored:
                return True
        elif isinstance(node, ast.Attribute) and ast.dump(ast.Attribute(node.value, node.attr, ast.Store())) in stored:
            return True
    return False


def _stores_on_object(statement) -> bool:
    """``self.cache = ...``, ``obj.h, obj.c = ...``: an assignment with an attribute among its targets."""
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
        targets = [statement.target]
    else:
        return False
    return any(isinstance(node, ast.Attribute) for target in targets
               for node in (target.elts if isinstance(target, (ast.Tuple, ast.List)) else (target,)))


def attribute_store(site: Site) -> Site | None:
    """Where the value computed by the statement at ``site`` is stored on an object, so that it outlives the call,
    graph and all: that statement itself (``self.cache = f(x)``), or, when it binds a plain name (``keys = f(x)``),
    the first later statement of its function that stores that name on an object (``memory.keys = keys``)."""
    tree = _tree(site.path)
    if tree is None:
        return None
    statement = _innermost_statement(tree, site.line)
    if statement is None:
        return None
    if _stores_on_object(statement):
        if _recurrent(statement, statement):
            return None
        return Site(site.path, statement.lineno, statement.col_offset + 1)
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)):
        return None
    name = statement.targets[0].id
    function = _innermost(tree, site.line, (ast.FunctionDef, ast.AsyncFunctionDef))
    later = [node for node in ast.walk(function if function is not None else tree)
             if isinstance(node, ast.stmt) and node.lineno > statement.end_lineno and _stores_on_object(node)
             and any(isinstance(v, ast.Name) and v.id == name
                     for v in (node.value.elts if isinstance(node.value, (ast.Tuple, ast.List)) else (node.value,)))]
    if not later:
        return None
    first = min(later, key=lambda node: node.lineno)
    if _recurrent(first, statement):
        return None
    return Site(site.path, first.lineno, first.col_offset + 1)


def _recurrent(store, computed) -> bool:
    """Whether the value stored by ``store`` is computed (by ``computed``) from the attribute it is stored in
    (``self.h = self.cell(x, self.h)``): a state carried from call to call, not a value kept as it was made."""
    targets = store.targets if isinstance(store, ast.Assign) else [store.target]
    stored = {ast.dump(node) for target in targets
              for node in (target.elts if isinstance(target, (ast.Tuple, ast.List)) else (target,))
              if isinstance(node, ast.Attribute)}
    for node in ast.walk(computed.value):
        if isinstance(node, ast.Attribute) and ast.dump(ast.Attribute(node.value, node.attr, ast.Store())) in stored:
            return True
    return False


def setter_write(site: Site) -> bool:
    """Whether the statement at ``site`` is a method writing, in place, a value its caller handed it into a tensor its
    own object holds: ``self._value.copy_(value)``, ``self.buf[i:j] = value``, ``self.total += value`` in a method
    whose first parameter is ``self`` and whose parameter ``value`` the written value names (an accessor like
    ``assign``: what it writes, and when, is the caller's choice)."""
    tree = _tree(site.path)
    if tree is None:
        return False
    function = _innermost(tree, site.line, (ast.FunctionDef, ast.AsyncFunctionDef))
    if function is None or not function.args.args or function.args.args[0].arg != "self":
        return False
    params = {a.arg for a in function.args.args[1:] + function.args.kwonlyargs}
    statement = _innermost_statement(function, site.line)
    target = value = None
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) \
            and isinstance(statement.value.func, ast.Attribute) and statement.value.func.attr.endswith("_"):
        target, value = statement.value.func.value, statement.value.args[:1]
    elif isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target, value = statement.targets[0], [statement.value]
    elif isinstance(statement, ast.AugAssign):
        target, value = statement.target, [statement.value]
    while isinstance(target, ast.Subscript):
        target = target.value
    if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"):
        return False
    return any(isinstance(n, ast.Name) and n.id in params for v in value or () for n in ast.walk(v))


def _latest_assignment(function: ast.AST, name: str, site: Site, value_matches) -> ast.Assign | None:
    """The latest ``name = <value>`` that ends before ``site`` in ``function`` and whose value ``value_matches``."""
    best = None
    for node in ast.walk(function):
        if (isinstance(node, ast.Assign) and node.end_lineno < site.line and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name
                and value_matches(node.value) and (best is None or node.lineno > best.lineno)):
            best = node
    return best


def is_return(site: Site) -> bool:
    """Whether the innermost statement at ``site`` is a ``return`` the user wrote (unknown source counts as one)."""
    tree = _tree(site.path)
    statement = _innermost_statement(tree, site.line) if tree is not None else None
    return statement is None or isinstance(statement, ast.Return)


def last_binding(site: Site, name: str) -> Site | None:
    """Where the function holding ``site`` last binds the plain name ``name`` in source order (the name's own
    span), or None when the source is unknown or the function binds no such name."""
    tree = _tree(site.path)
    function = _innermost(tree, site.line, (ast.FunctionDef, ast.AsyncFunctionDef)) if tree is not None else None
    if function is None:
        return None
    stores = [n for n in ast.walk(function)
              if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)]
    if not stores:
        return None
    last = max(stores, key=lambda n: (n.lineno, n.col_offset))
    return Site(site.path, last.lineno, last.col_offset + 1, last.end_lineno or last.lineno,
                (last.end_col_offset or last.col_offset) + 1)


def first_reader_of_binding(site: Site) -> Site | None:
    """For a statement ``name = <value>`` at ``site``: the first later statement of its function that reads ``name``
    (where the value is handed on), as a Site of that statement; None when the statement binds no plain name or
    nothing reads it."""
    tree = _tree(site.path)
    if tree is None:
        return None
    function = _innermost(tree, site.line, (ast.FunctionDef, ast.AsyncFunctionDef)) or tree
    statement = _innermost_statement(function, site.line)
    if not isinstance(statement, ast.Assign) or len(statement.targets) != 1 \
            or not isinstance(statement.targets[0], ast.Name):
        return None
    name = statement.targets[0].id
    best = None
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load) \
                and node.lineno > (statement.end_lineno or statement.lineno):
            reader = _innermost_statement(function, node.lineno)
            if reader is not None and (best is None or reader.lineno < best.lineno):
                best = reader
    if best is None:
        return None
    return Site(site.path, best.lineno, best.col_offset + 1, best.end_lineno, best.end_col_offset + 1)


def assignments_read_at(site: Site) -> list[Site]:
    """For each plain name the statement at ``site`` reads: the latest statement of its function, ending before
    ``site``, that binds it (``name = ...``, a tuple target too), as a Site of that statement.  Names bound only as
    parameters or loop targets give none."""
    tree = _tree(site.path)
    if tree is None:
        return []
    function = _innermost(tree, site.line, (ast.FunctionDef, ast.AsyncFunctionDef)) or tree
    statement = _innermost_statement(function, site.line)
    if statement is None:
        return []
    read = {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    best: dict[str, ast.stmt] = {}
    for node in ast.walk(function):
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.end_lineno >= statement.lineno:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name) and name.id in read and (
                        name.id not in best or node.lineno > best[name.id].lineno):
                    best[name.id] = node
    return [Site(site.path, node.lineno, node.col_offset + 1, node.end_lineno, node.end_col_offset + 1)
            for node in best.values()]


def _function_and_statement(site: Site) -> tuple[ast.AST, ast.stmt | None] | None:
    """The innermost function around ``site`` and its innermost statement at the site's line."""
    tree = _tree(site.path)
    if tree is None:
        return None
    function = _innermost(tree, site.line, (ast.FunctionDef, ast.AsyncFunctionDef))
    if function is None:
        return None
    return function, _innermost_statement(function, site.line)


def _function_and_name(site: Site):
    found = _function_and_statement(site)
    if found is None:
        return None
    function, statement = found
    name = _written_name(statement)
    return (function, name) if name is not None else None


def _unless_rebound(function, name: str, best, site: Site, whole: bool = False) -> Site | None:
    """``best``'s site (the whole statement, or its call), unless ``name`` is bound again before ``site``."""
    if best is None:
        return None
    # Only when nothing rebinds the name in between (another assignment, a loop target...).
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store) \
                and best.end_lineno < node.lineno < site.line:
            return None
    part = best if whole else best.value
    return Site(site.path, part.lineno, part.col_offset + 1, part.end_lineno, part.end_col_offset + 1)


def _written_name(statement) -> str | None:
    """The plain name a statement writes in place: ``x -= m``, ``x[i] = v``, ``x.sub_(m)``."""
    if isinstance(statement, ast.AugAssign) and isinstance(statement.target, ast.Name):
        return statement.target.id
    if isinstance(statement, ast.AugAssign) and isinstance(statement.target, ast.Subscript) \
            and isinstance(statement.target.value, ast.Name):
        return statement.target.value.id
    targets = statement.targets if isinstance(statement, ast.Assign) else []
    for target in targets:
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            return target.value.id
    if isinstance(statement, (ast.Expr, ast.Assign)) and isinstance(statement.value, ast.Call):
        func = statement.value.func
        if isinstance(func, ast.Attribute) and func.attr.endswith("_") and isinstance(func.value, ast.Name):
            return func.value.id
        if isinstance(func, ast.Attribute) and func.attr.endswith("_") and isinstance(func.value, ast.Subscript) \
                and isinstance(func.value.value, ast.Name):
            return func.value.value.id  # x[i].mul_(s)
    return None


def guarded_flag_write(site: Site, attr: str) -> tuple[Site, str] | None:
    """When the statement at ``site`` is ``X.attr = NAME`` (or ``X.attr_(NAME)``) guarded by ``X.attr`` itself -- inside ``if X.attr:``
    (or ``if X.attr and ...:``), or after ``if not X.attr: continue`` in the same block -- the guard's test and
    ``NAME``: a False the line writes can never be undone by the line.  None otherwise."""
    found = _function_and_statement(site)
    if found is None:
        return None
    function, statement = found
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.value, ast.Name) \
            and isinstance(statement.targets[0], ast.Attribute) and statement.targets[0].attr == attr:
        owner, value = statement.targets[0].value, statement.value
    elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) \
            and isinstance(statement.value.func, ast.Attribute) and statement.value.func.attr == attr + "_" \
            and len(statement.value.args) == 1 and isinstance(statement.value.args[0], ast.Name) \
            and not statement.value.keywords:
        owner, value = statement.value.func.value, statement.value.args[0]  # X.attr_(NAME)
    else:
        return None
    flag = ast.dump(owner)

    def reads_flag(test) -> bool:
        return isinstance(test, ast.Attribute) and test.attr == attr and ast.dump(test.value) == flag

    def guards(test) -> bool:
        return reads_flag(test) or (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)
                                    and any(reads_flag(v) for v in test.values))

    def test_site(test) -> Site:
        return Site(site.path, test.lineno, test.col_offset + 1, test.end_lineno, test.end_col_offset + 1)

    for node in ast.walk(function):
        if isinstance(node, ast.If) and guards(node.test) and any(s is statement for b in node.body
                                                                  for s in ast.walk(b)):
            return test_site(node.test), value.id
        for _, block in blocks(node):
            if not any(s is statement for s in block):
                continue
            for s in block[:block.index(statement)]:
                if isinstance(s, ast.If) and isinstance(s.test, ast.UnaryOp) and isinstance(s.test.op, ast.Not) \
                        and reads_flag(s.test.operand) and len(s.body) == 1 and isinstance(s.body[0], ast.Continue):
                    return test_site(s.test), value.id
    return None
