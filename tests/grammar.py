"""A grammar of deep and long Python programs that look like torch code, for ``test_fuzz_grammar.py``.

Hypothesis draws the shape (which nestings, how deep, how many functions, how long a line); the text is
assembled here without recursion, so a 20,000-level expression costs no more to build than to read.  Every
program holds one ``sentinel`` function with a real GG001 (``torch_proof`` in the tests runs it with torch),
which must be found whatever surrounds it.  ``Program.invalid`` says the program breaks one of CPython's
hard limits (201 nested brackets, 100 levels of indentation, an int literal of more than 4,300 digits): then,
and only then, a syntax error (GG900) is the right answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hypothesis import strategies as st

HOLE = "$"
# One level of nesting each: text around the expression below.  The bracketed ones count towards CPython's
# limit of 200 open brackets; the others (operator chains, attributes, calls, lambdas) nest without limit.
WRAPPERS = [
    "$ + t", "$ * 2", "$ ** 2", "$ @ w", "$ - y.exp_()",  # operator chains (left- and right-nested)
    "$.a", "$[0]", "$[1:]", "$()", "$.add_(1)", "$.sum()", "$.view(-1)",  # postfix chains
    "-$", "~$", "not $", "lambda: $", "lambda q: $", "t if c else $",  # prefixes
    "$ < t", "$ and t", "$ or w",  # flat (one node however long)
    "($)", "[$]", "($,)", "{'k': $}", "{$}", "f($)", "torch.exp($)", "F.relu($, inplace=True)",
    "[$ for i in r]", "sum($ for i in r)", "x[$]", "g(k=$)", "torch.sigmoid($).mul_(2)",
]
_BRACKETED = {w for w in WRAPPERS if w.startswith(("(", "[", "{", "f(", "torch.", "F.", "sum(", "x[", "g("))}
_UNBRACKETED = [w for w in WRAPPERS if w not in _BRACKETED]
_PREFIX = {"-$", "~$", "not $"}
_ENDS_WITH_INT = re.compile(r"(?<![\w.])\d+$")
LEAVES = ["y", "t", "w", "x", "y.add_(1)", "torch.exp(w)", "2.0", "1.5", "'s'", "None", "t.sum()"]

PRELUDE = """\
import torch
import torch.nn.functional as F

w = torch.randn(3, requires_grad=True)
t = torch.exp(w)
y = t * 2
x = torch.zeros(3)
c = True
r = range(3)
"""

SENTINEL = """\
def sentinel():
    w0 = torch.randn(3, requires_grad=True)
    y0 = torch.exp(w0)
    y0.add_(1)
    y0.sum().backward()
"""
SENTINEL_WRITE = 4  # the line of ``y0.add_(1)`` in SENTINEL

MAX_BRACKETS = 200  # CPython: "too many nested parentheses" past this
MAX_INDENT = 99  # CPython: "too many levels of indentation" from 100
MAX_INT_DIGITS = 4300  # CPython: int literals longer than this are refused (sys.get_int_max_str_digits)


@dataclass(frozen=True)
class Program:
    text: str
    sentinel_line: int  # the line of the sentinel's in-place write (GG001)
    invalid: bool  # breaks one of CPython's limits: a syntax error is expected


@dataclass(frozen=True)
class Piece:
    text: str
    invalid: bool = False


def nest(wrappers: list[str], depth: int, leaf: str) -> tuple[str, int]:
    """``leaf`` wrapped ``depth`` times, cycling through ``wrappers``; also the deepest bracket nesting."""
    prefixes, suffixes = [], []
    head, brackets, open_now = leaf, 0, 0
    tail = leaf  # the end of the text so far: a postfix after an integer literal needs a space
    for level in range(depth):
        wrapper = wrappers[level % len(wrappers)]
        if wrapper in _PREFIX and head.startswith(("lambda", "not")) or wrapper == "not $" and head.startswith("lambda"):
            prefixes.append("(")  # `-lambda: y` and `not lambda: y` do not parse
            suffixes.append(")")
            open_now += 1
        before, after = wrapper.split(HOLE)
        if after.startswith(".") and _ENDS_WITH_INT.search(tail):
            after = " " + after  # `2 .add_(1)`: `2.add_` is an invalid decimal literal
        prefixes.append(before)
        suffixes.append(after)
        tail = (tail + after)[-24:]
        if before:
            head = before
        if wrapper in _BRACKETED:
            open_now += 1
        brackets = max(brackets, open_now)
    text = "".join(reversed(prefixes)) + leaf + "".join(suffixes)
    return text, brackets


_depths = st.one_of(
    st.integers(1, 40),
    st.integers(80, 130),  # around the analysis bound (bounds.MAX_EXPRESSION_DEPTH)
    st.integers(150, 1200),
    st.integers(2500, 3500),  # around where Python's own parser gives up
    st.sampled_from([6000, 20000]),
)


@st.composite
def deep_expressions(draw) -> tuple[str, bool]:
    # Mostly without brackets: past 200 nested brackets a program is only a syntax error.
    pool = draw(st.sampled_from([_UNBRACKETED, _UNBRACKETED, WRAPPERS]))
    wrappers = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=5))
    depth = draw(_depths)
    text, brackets = nest(wrappers, depth, draw(st.sampled_from(LEAVES)))
    return text, brackets > MAX_BRACKETS


_STATEMENTS = ["z = $", "$", "y += $", "z: int = $", "for i in $:\n    y.add_(1)", "if $:\n    y.mul_(2)",
               "while $:\n    break", "with $ as q:\n    pass", "assert $", "del x[$]", "y[$] = t"]
_IN_FUNCTION = ["return $", "yield $", "def inner(a=$):\n    return a"]
_OPENERS = ["if c:", "for i in r:", "while c:", "with torch.no_grad():", "def nested_{n}(a):", "class Nested_{n}:",
            "try:"]
_NOT_LOOPS = [o for o in _OPENERS if not o.startswith(("for", "while"))]


def _indent(text: str, levels: int) -> str:
    pad = "    " * levels
    return "\n".join(pad + line if line else line for line in text.split("\n"))


@st.composite
def deep_statements(draw) -> Piece:
    """A statement holding a deep expression, at the top level, in a function or a method, or inside nested
    blocks."""
    expr, invalid = draw(deep_expressions())
    where = draw(st.sampled_from(["top", "function", "method", "blocks"]))
    forms = _STATEMENTS + (_IN_FUNCTION if where != "top" else [])
    stmt = draw(st.sampled_from(forms)).replace(HOLE, expr)
    name = f"fn_{draw(st.integers(0, 10**6))}"
    if where == "top":
        return Piece(stmt + "\n", invalid)
    if where == "function":
        return Piece(f"def {name}(t):\n    y = torch.exp(t)\n{_indent(stmt, 1)}\n    return y\n", invalid)
    if where == "method":
        return Piece(f"class M_{name}(torch.nn.Module):\n    def forward(self, t):\n        y = torch.sigmoid(t)\n"
                     f"{_indent(stmt, 2)}\n        return y\n", invalid)
    _, piece = draw(nested_blocks(inner=stmt))
    return Piece(piece.text, invalid or piece.invalid)


@st.composite
def nested_blocks(draw, inner: str | None = None):
    """Blocks nested ``depth`` deep (up to and past CPython's 100 levels of indentation)."""
    depth = draw(st.one_of(st.integers(1, 12), st.integers(90, 101)))
    # Loops run their body twice: loops nested past 18 levels always end at the analysis' step bound
    # (GG903, after a second or two), so only one deep nesting in ten has them.
    loops = depth <= 18 or draw(st.integers(0, 9)) == 0
    openers = draw(st.lists(st.sampled_from(_OPENERS if loops else _NOT_LOOPS), min_size=1, max_size=4))
    body = inner if inner is not None else "y = t * 2\ny.add_(1)\ny.sum().backward()"
    lines = []
    for level in range(depth):
        opener = openers[level % len(openers)].format(n=level)
        lines.append("    " * level + opener)
    lines.append(_indent(body, depth))
    # `try:` needs a handler: closed innermost first, each at its own level.
    for level in reversed(range(depth)):
        if openers[level % len(openers)] == "try:":
            lines.append("    " * level + "except Exception:\n" + "    " * (level + 1) + "pass")
    return depth, Piece("\n".join(lines) + "\n", depth > MAX_INDENT)


@st.composite
def many_functions(draw) -> Piece:
    """Many functions, each calling the one before it (the analysis follows calls into the file's code)."""
    count = draw(st.one_of(st.integers(1, 30), st.integers(100, 500)))
    out = ["def chain_0(a):\n    return a * 2\n"]
    for i in range(1, count):
        out.append(f"def chain_{i}(a):\n    b = torch.sigmoid(a)\n    b.mul_(2)\n    return chain_{i - 1}(b)\n")
    return Piece("".join(out))


@st.composite
def huge_literals(draw) -> Piece:
    size = draw(st.one_of(st.integers(1, 100), st.integers(1000, 20000)))
    kind = draw(st.sampled_from(["list", "dict", "str", "bytes", "int", "tuple", "set", "tensor"]))
    if kind == "int":
        return Piece(f"big = {'7' * size}\n", size > MAX_INT_DIGITS)
    if kind == "str":
        return Piece(f"s = '{'a' * size}'\n")
    if kind == "bytes":
        return Piece(f"b = b'{'b' * size}'\n")
    items = ", ".join(str(i) for i in range(size))
    if kind == "dict":
        return Piece("d = {" + ", ".join(f"{i}: {i}" for i in range(size)) + "}\n")
    if kind == "tensor":
        return Piece(f"big_t = torch.tensor([{items}], requires_grad=True)\nbig_t.add_(1)\n")
    opening, closing = {"list": "[]", "tuple": "()", "set": "{}"}[kind]
    return Piece(f"lit = {opening}{items}{',' if kind == 'tuple' else ''}{closing}\n")


@st.composite
def long_lines(draw) -> Piece:
    count = draw(st.one_of(st.integers(1, 50), st.integers(500, 3000)))
    stmts = draw(st.lists(st.sampled_from(["t.add_(1)", "y = t * 2", "z = y.sum()", "x[0] = 1", "pass"]),
                          min_size=1, max_size=5))
    return Piece("; ".join(stmts[i % len(stmts)] for i in range(count)) + "\n")


@st.composite
def programs(draw) -> Program:
    others = draw(st.lists(st.one_of(deep_statements(), nested_blocks().map(lambda p: p[1]), many_functions(),
                                     huge_literals(), long_lines()), max_size=3))
    pieces = draw(st.permutations([draw(deep_statements()), *others]))  # always one deep expression
    at = draw(st.integers(0, len(pieces)))
    texts = [p.text for p in pieces]
    before = PRELUDE + "\n" + "\n".join(texts[:at]) + "\n"
    text = before + SENTINEL + "\n" + "\n".join(texts[at:])
    return Program(text, before.count("\n") + SENTINEL_WRITE, any(p.invalid for p in pieces))
