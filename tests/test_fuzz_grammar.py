"""Fuzz the analysis with deep and long programs built from a grammar (``grammar.py``).

Properties, for every program:
  - ``analyze_source`` never raises and every diagnostic is well formed (``test_fuzz.check``);
  - a syntax error (GG900) exactly when CPython's parser says so;
  - no all-clear for what was not analysed: an expression deeper than ``bounds.MAX_EXPRESSION_DEPTH``, or
    a file Python's own parser gives up on, comes with a GG903;
  - the rest is still analysed: the sentinel function's GG001 is always found;
  - time grows linearly with the size of the file (``test_time_is_linear_in_size``).

The number of programs comes from ``GRADGUARD_GRAMMAR_EXAMPLES`` (default 40: about 25 s here), the seed from
``GRADGUARD_GRAMMAR_SEED``; ``make fuzz`` runs 10,000 (two seeded shards of 5,000) and logs each program's
cost to ``.fuzz/*.log`` (``GRADGUARD_FUZZ_LOG``).
"""

from __future__ import annotations

import ast
import gc
import inspect
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path
import warnings

import pytest
from hypothesis import HealthCheck, assume, event, given, seed, settings
from hypothesis import strategies as st

from grammar import PRELUDE, SENTINEL, SENTINEL_WRITE, deep_expressions, nest, programs
from gradguard.api import analyze_source
from gradguard.bounds import MAX_EXPRESSION_DEPTH, _deeper_than, expression_depth
from gradguard.cli import main
from gradguard.diagnostics import NOT_ANALYSED, SYNTAX_ERROR
from test_fuzz import check

EXAMPLES = int(os.environ.get("GRADGUARD_GRAMMAR_EXAMPLES", "40"))
SEED = int(os.environ.get("GRADGUARD_GRAMMAR_SEED", "20260516"))


PROGRESS = os.environ.get("GRADGUARD_FUZZ_LOG")  # a file: one line per program (``make fuzz`` runs for long)
_numbers = itertools.count(1)  # the programs in the order this process ran them
SLOW_SECONDS = 10


def _log(text: str, seconds: float) -> None:
    """With ``GRADGUARD_FUZZ_LOG``: each program's number, CPU seconds and size, so that a long run shows how far
    it is and which programs cost most; a program slower than ``SLOW_SECONDS`` is kept beside the log."""
    number = next(_numbers)
    if PROGRESS:
        with open(PROGRESS, "a", encoding="utf-8") as log:
            log.write(f"{number} {seconds:.2f}s {len(text)} chars {text.count(chr(10)) + 1} lines\n")
        if seconds > SLOW_SECONDS:  # kept to be profiled: the run's order of programs is not reproducible alone
            Path(f"{PROGRESS}.slow-{number}.py").write_text(text, encoding="utf-8")


def python_says(text: str) -> tuple[str, int]:
    """What CPython's parser makes of ``text``: "ok" (and the deepest expression), "syntax" or "too deep"."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
    except SyntaxError:
        return "syntax", 0
    except (RecursionError, MemoryError):
        return "too deep", 0
    roots = [n for n in ast.walk(tree) if isinstance(n, ast.stmt)]
    # A part of a statement that is no expression (a `with` item, an `except` clause) counts one level itself;
    # measuring each expression inside it instead cost the fuzz most of its time (quadratic in its size).
    deepest = max((expression_depth(part) - (not isinstance(part, ast.expr)) for stmt in roots
                   for part in ast.iter_child_nodes(stmt) if not isinstance(part, ast.stmt)), default=0)
    return "ok", deepest


@seed(SEED)
@settings(max_examples=EXAMPLES, deadline=None, database=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(program=programs())
def test_deep_and_long_programs(program):
    if PROGRESS:  # the program being analysed, should a run hang
        Path(PROGRESS + ".current.py").write_text(program.text, encoding="utf-8")
    started = time.process_time()
    result = check(program.text)
    _log(program.text, time.process_time() - started)
    codes = [d.code for d in result.diagnostics]
    verdict, deepest = python_says(program.text)
    event(f"Python's parser: {verdict}")  # shown by --hypothesis-show-statistics
    for code in sorted({c for c in codes if c.startswith("GG9")}):
        event(f"{code}: " + ("too many steps" if any("steps" in d.message for d in result.diagnostics) else
                             "recursion limit" if any("recursion limit" in d.message for d in result.diagnostics)
                             else "depth"))
    if verdict == "syntax" or (verdict == "too deep" and program.invalid and codes == [SYNTAX_ERROR]):
        # Too deep and invalid: Python's parser stops at whichever it meets first, statement by statement.
        assert codes == [SYNTAX_ERROR], result.diagnostics
        return
    assert verdict == "too deep" or not program.invalid, "the grammar marked a program CPython accepts as invalid"
    assert SYNTAX_ERROR not in codes, result.diagnostics
    assert ("GG001", program.sentinel_line) in [(d.code, d.line) for d in result.diagnostics], result.diagnostics
    if verdict == "too deep" or deepest > MAX_EXPRESSION_DEPTH:
        assert NOT_ANALYSED in codes, (verdict, deepest)
    for diag in result.diagnostics:
        if diag.code == NOT_ANALYSED:
            assert diag.message.startswith("not analysed: ") and "was skipped" in diag.message, diag.message


@seed(SEED)
@settings(max_examples=4 * EXAMPLES, deadline=None, database=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(expression=deep_expressions(), limit=st.integers(1, 2 * MAX_EXPRESSION_DEPTH),
       layout=st.sampled_from(["line", "lines", "f-string"]))
def test_the_depth_bound_skips_only_parts_that_cannot_reach_it(expression, limit, layout):
    """``bounds`` measures a wide expression's depth without entering its parts too narrow to reach the limit
    from where they are: the answer is always that of the full measure, on one line, over lines, in an f-string."""
    text = {"line": f"({expression[0]})", "lines": "(" + expression[0].replace(" + ", " +\n ") + ")",
            "f-string": 'f"{' + expression[0] + '}"'}[layout]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            root = ast.parse(text, mode="eval").body
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        assume(False)
    assert _deeper_than(root, limit) == (expression_depth(root) > limit)


def test_sentinel_breaks_autograd_under_torch():
    """The GG001 every program must keep is real: torch raises at its backward."""
    torch = pytest.importorskip("torch")
    scope = {"torch": torch}
    exec(compile(SENTINEL, "sentinel", "exec"), scope)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        scope["sentinel"]()


# --- the examples, through the real CLI --------------------------------------------------------------

LONG = "import torch\nw = torch.randn(3, requires_grad=True)\ny = torch.exp(w)\ny.add_(1)\ny.sum().backward()\nz = "


@pytest.mark.parametrize("terms", [500, 2000, 20000])
def test_long_sum_keeps_the_real_finding(tmp_path, capsys, terms):
    path = tmp_path / "long.py"
    path.write_text(LONG + " + ".join(["y"] * terms) + "\n")
    code = main(["check", "--no-cache", str(path)])
    out, err = capsys.readouterr()
    assert code == 1, (out, err)  # findings, GG903 among them: not 2 (no internal error), not 0
    assert "internal error" not in err and "All checks passed" not in err, err
    assert f"{path}:4:1: GG001" in out, out
    assert f"{path}:6:" in out and "GG903 not analysed: " in out, out
    assert "Found 2 problems in 1 file" in err


def test_not_analysed_is_in_json_and_sarif(tmp_path, capsys):
    import json

    path = tmp_path / "long.py"
    path.write_text(LONG + " + ".join(["y"] * 500) + "\n")
    assert main(["check", "--no-cache", "--format", "json", str(path)]) == 1
    found = json.loads(capsys.readouterr().out)["diagnostics"]
    deep = [d for d in found if d["code"] == NOT_ANALYSED]
    assert len(deep) == 1 and deep[0]["severity"] == "error" and deep[0]["line"] == 6
    assert "nested 500 levels deep" in deep[0]["message"] and f"up to {MAX_EXPRESSION_DEPTH}" in deep[0]["message"]
    assert main(["check", "--no-cache", "--format", "sarif", str(path)]) == 1
    run = json.loads(capsys.readouterr().out)["runs"][0]
    assert NOT_ANALYSED in [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert NOT_ANALYSED in [r["ruleId"] for r in run["results"]]


def test_deep_function_names_what_was_skipped():
    """A function Python's parser cannot build is skipped by name; the sentinel after it is still analysed."""
    deep = nest(["$ + t"], 20000, "y")[0]
    text = PRELUDE + f"def f(t):\n    return {deep}\n\n" + SENTINEL
    result = check(text)
    skipped = [d for d in result.diagnostics if d.code == NOT_ANALYSED]
    assert len(skipped) == 1 and skipped[0].line == PRELUDE.count("\n") + 1, result.diagnostics
    assert "the function `f` on line" in skipped[0].message
    sentinel = PRELUDE.count("\n") + 3 + SENTINEL_WRITE
    assert ("GG001", sentinel) in [(d.code, d.line) for d in result.diagnostics]


@pytest.mark.parametrize("start", ["2.0", "(w)", "'s'", "-w", "w"])
def test_statement_too_deep_for_python_that_begins_with_no_name(start):
    """`2.0 @ w @ w @ ...` (found by the fuzz): the statement's first name-or-operator word is `@`, but it is no
    decorator.  It is skipped as "the statement" (it used to raise ValueError looking for its `def`)."""
    text = PRELUDE + start + " @ w" * 8000 + "\n\n" + SENTINEL
    result = check(text)
    skipped = [d for d in result.diagnostics if d.code == NOT_ANALYSED]
    assert [d.line for d in skipped] == [PRELUDE.count("\n") + 1], result.diagnostics
    assert "the statement on line" in skipped[0].message
    sentinel = PRELUDE.count("\n") + 2 + SENTINEL_WRITE
    assert ("GG001", sentinel) in [(d.code, d.line) for d in result.diagnostics]


def test_too_many_steps_is_reported_not_run_for_minutes():
    """Loops run their body twice (the innermost four of a nest), so four nested loops around 12,000 statements
    are some 600,000 steps: the function is skipped by name."""
    body = "".join("    " * (i + 1) + f"for i{i} in r:\n" for i in range(4)) + ("    " * 5 + "y = y + 1\n") * 12_000
    text = PRELUDE + "def loops(y):\n" + body + "    " * 5 + "y.add_(1)\n\n" + SENTINEL
    started = time.perf_counter()
    result = check(text)
    assert time.perf_counter() - started < 20
    skipped = [d for d in result.diagnostics if d.code == NOT_ANALYSED]
    assert [d.line for d in skipped] == [PRELUDE.count("\n") + 1], result.diagnostics
    assert "the function `loops`" in skipped[0].message and "steps" in skipped[0].message


@pytest.mark.parametrize("depth", [14, 30])
def test_deep_loop_nests_are_analysed_in_bounded_time_and_memory(depth):
    """Only the innermost four loops of a nest run twice: 30 nested loops are not 2**30 runs of the body.  Before,
    14 nested loops around a write to a tensor that an op in the loop saves took 80 s and 2 GB (each write kept
    every earlier save: the 10,000-program fuzz was killed by the OOM killer at 23 GB)."""
    loops = "".join("    " * i + f"for i{i} in range(3):\n" for i in range(depth))
    text = ("import torch\nw = torch.randn(3, requires_grad=True)\ny = torch.exp(w)\n" + loops
            + "    " * depth + "z = (y * y) < y.add_(1)\n" + "y.sum().backward()\n")
    started = time.perf_counter()
    result = check(text)
    assert time.perf_counter() - started < 5
    assert [d.code for d in result.diagnostics] == ["GG001"]


def test_no_candidates_no_finding():
    """A deep expression in a file with no in-place idiom at all: nothing there could be a finding."""
    assert check("z = " + " + ".join(["a"] * 600) + "\n").diagnostics == []


# --- time ----------------------------------------------------------------------------------------------------

def _families():
    """Programs made of ``n`` copies of a part: the cost per KB must not grow with ``n``."""
    deep_sum = nest(["$ + t"], 150, "y")[0]
    yield "deep expressions", lambda n: PRELUDE + "".join(
        f"def d{i}(t):\n    y = torch.exp(t)\n    y.add_(1)\n    z = {deep_sum}\n    return z\n" for i in range(n))
    yield "chained functions", lambda n: PRELUDE + "def c0(a):\n    return a\n" + "".join(
        f"def c{i}(a):\n    b = torch.sigmoid(a)\n    b.mul_(2)\n    return c{i - 1}(b)\n" for i in range(1, 8 * n))
    yield "nested blocks", lambda n: PRELUDE + "".join(
        "".join("    " * j + ("if c:\n" if j % 2 else "for i in r:\n") for j in range(6)) + "    " * 6 + "y.add_(1)\n"
        for _ in range(4 * n))
    yield "long line", lambda n: PRELUDE + "; ".join(["t.add_(1)", "y = t * 2"] * (200 * n)) + "\n"
    yield "huge literal", lambda n: PRELUDE + "lit = [" + ", ".join(map(str, range(3000 * n))) + "]\nt.add_(1)\n"
    yield "too deep for Python", lambda n: PRELUDE + "".join(
        f"z{i} = " + nest(["$ + t"], 4000, "y")[0] + "\n" for i in range(n))


def _seconds(text: str) -> float:
    """The analysis' own CPU time (``time.process_time``: another program's work on the same CPUs is not counted,
    where wall-clock time came out 3-6 times apart between sizes on a busy machine), the best of three runs,
    with Python's cyclic garbage collector off: its collections cost more as the heap grows, in any program
    (``ast.parse`` alone goes from 0.9 to 1.4 ms/KB over 16x the size with it on, flat at 0.7 without), and
    that is not the analysis' own cost."""
    best = float("inf")
    for _ in range(3):
        gc.collect()
        gc.disable()
        try:
            started = time.process_time()
            analyze_source(text, "fuzz.py")
            best = min(best, time.process_time() - started)
        finally:
            gc.enable()
    return best


def time_ratios(sizes=(4, 8, 16, 32)) -> dict[str, tuple[float, list[float]]]:
    """For each family: the largest over the smallest cost per KB across ``sizes``, and the costs (ms/KB)."""
    out = {}
    for name, make in _families():
        costs = []
        for n in sizes:
            text = make(n)
            costs.append(1000 * _seconds(text) / (len(text) / 1024))
        out[name] = (max(costs) / min(costs), costs)
    return out


def test_time_is_linear_in_size():
    ratios = time_ratios()
    report = {name: (round(r, 2), [round(c, 3) for c in costs]) for name, (r, costs) in ratios.items()}
    print("cost per KB (ms), worst/best:", report)
    assert all(r < 3 for r, _ in ratios.values()), report


def test_notebook_cells_too_deep(tmp_path, capsys):
    """A cell too deep for Python's parser is not a syntax error: it gets GG903 and the cells around it are
    analysed as one program (the GG001 spans cells 1 and 3)."""
    import json

    cells = ["import torch\nw = torch.randn(3, requires_grad=True)\ny = torch.exp(w)",
             "z = " + " + ".join(["y"] * 20000), "y.add_(1)\ny.sum().backward()", "q = " + " + ".join(["y"] * 500)]
    notebook = {"cells": [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None}
                          for c in cells],
                "metadata": {"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
                "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "deep.ipynb"
    path.write_text(json.dumps(notebook))
    assert main(["check", "--no-cache", "--format", "json", str(path)]) == 1
    found = [(d["cell"], d["line"], d["code"]) for d in json.loads(capsys.readouterr().out)["diagnostics"]]
    assert found == [(2, 1, NOT_ANALYSED), (3, 1, "GG001"), (4, 1, NOT_ANALYSED)]


def test_recursion_limit_is_reported():
    """Blocks 97 deep around calls nested 99 deep stay within each bound, not within Python's recursion
    limit together: the function is skipped by name, the rest of the file is analysed."""
    blocks = "".join("    " * (i + 1) + "if c:\n" for i in range(97))
    text = (PRELUDE + "def f(y):\n" + blocks + "    " * 98 + "z = " + nest(["f($)"], 99, "y")[0] + "\n"
            + "    " * 98 + "y.add_(1)\n    return y\n\n" + SENTINEL)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + 600)  # the analysis of f needs about 1,100 frames
    try:
        result = check(text)
    finally:
        sys.setrecursionlimit(limit)
    skipped = [d for d in result.diagnostics if d.code == NOT_ANALYSED]
    assert [d.line for d in skipped] == [PRELUDE.count("\n") + 1], result.diagnostics
    assert "the function `f`" in skipped[0].message and "recursion limit" in skipped[0].message
    assert "GG001" in [d.code for d in result.diagnostics]


def test_wide_expression_in_nested_loops_is_bounded_too():
    """A step is also an expression evaluated: four nested loops run twelve 3,000-operand comparisons 16 times
    (576,000 evaluations), which the step bound stops."""
    body = "".join("    " * (i + 1) + f"for i{i} in r:\n" for i in range(4))
    wide = " < ".join(["t"] * 3000)
    text = (PRELUDE + "def loops(y):\n" + body + ("    " * 5 + f"z = {wide}\n") * 12 + "    " * 5 + "y.add_(1)\n\n"
            + SENTINEL)
    started = time.perf_counter()
    result = check(text)
    assert time.perf_counter() - started < 20
    skipped = [d for d in result.diagnostics if d.code == NOT_ANALYSED]
    assert [d.line for d in skipped] == [PRELUDE.count("\n") + 1] and "steps" in skipped[0].message, result.diagnostics


def test_every_pair_of_wrappers_nests_into_valid_python():
    """The grammar's programs are valid unless marked invalid, whatever wrappers meet: a postfix after an integer
    literal (`y * 2` then `.add_(1)`) made `2.add_(1)`, an invalid decimal literal, which the fuzz took for a
    valid program when it was also too deep for CPython (found at seed 20261124)."""
    import itertools

    from grammar import LEAVES, WRAPPERS

    bad = []
    for first, second in itertools.product(WRAPPERS, repeat=2):
        for leaf in LEAVES:
            text, _ = nest([first, second], 4, leaf)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    ast.parse(text)
                except SyntaxError:
                    bad.append(text)
    assert not bad, bad[:5]


def test_a_long_and_chain_in_a_fixed_statement_does_not_crash_the_process(tmp_path):
    """libcst's native parser segfaults on an ``and`` chain of some 5,000+ terms (found by the 10,000-program fuzz,
    seed 20261124: the process died building a GG001 fix).  Python parses such a chain flat, so it is analysed;
    a fix that would hand it to libcst is not built, another one is, and the CLI answers normally."""
    chain = " and ".join(["c"] * 20_000)
    src = ("import torch\n\n\ndef f(c=True):\n    w = torch.randn(3, requires_grad=True)\n    y = torch.exp(w)\n"
           f"    y.mul_(2 if ({chain}) else 3)\n    y.sum().backward()\n")
    path = tmp_path / "chain.py"
    path.write_text(src, encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "gradguard", "check", "--fix", str(path)], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "server")})
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])  # not a crash (-11)
    fixed = path.read_text(encoding="utf-8")  # fixed where libcst may parse: the clone where exp saved its output
    assert "y = torch.exp(w).clone()" in fixed and f"    y.mul_(2 if ({chain}) else 3)\n" in fixed
