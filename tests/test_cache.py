"""The per-document cache: an edit re-analyses only the functions it can affect, and never changes results."""

from __future__ import annotations

import textwrap

import pytest

from gradguard import engine
from gradguard.api import analyze_source

SOURCE = textwrap.dedent('''
    import torch
    import torch.nn as nn


    def scale_(t):
        t.mul_(2)


    def first():
        x = torch.zeros(3, requires_grad=True)
        x += 1


    def second():
        w = torch.randn(3, requires_grad=True)
        y = torch.sigmoid(w)
        y += 1
        y.sum().backward()


    def third():
        w = torch.randn(3, requires_grad=True)
        y = torch.exp(w)
        scale_(y)
        y.sum().backward()
''')


def _findings(result):
    return [(d.line, d.code, d.message) for d in result.diagnostics]


@pytest.fixture
def runs(monkeypatch):
    """Counts the functions the engine really analyses (cache misses)."""
    analysed = []
    real = engine._run_unit

    def counting(ctx, fn, owner, tree, module_env):
        analysed.append(fn.name if fn is not None else "<module>")
        return real(ctx, fn, owner, tree, module_env)

    monkeypatch.setattr(engine, "_run_unit", counting)
    return analysed


def test_an_edit_inside_one_function_reanalyses_only_it(runs):
    cache: dict = {}
    analyze_source(SOURCE, "f.py", cache=cache)
    assert set(runs) >= {"first", "second", "third"}
    runs.clear()
    edited = SOURCE.replace("x += 1", "x += 2")
    result = analyze_source(edited, "f.py", cache=cache)
    assert runs == ["first"]
    assert _findings(result) == _findings(analyze_source(edited, "f.py"))


def test_an_edit_reads_the_words_of_only_the_functions_whose_text_changed(monkeypatch):
    """Which functions can reach a candidate is read from the words of their texts (``engine._words``): a
    keystroke reads those of the edited function again, not every function's."""
    read = []
    real = engine._words
    monkeypatch.setattr(engine, "_words", lambda text: read.append(text.split("(")[0]) or real(text))
    source = SOURCE + "\n\ndef fourth():\n    return first()\n\n\ndef fifth():\n    return 1\n"
    cache: dict = {}
    analyze_source(source, "f.py", cache=cache, fixes=False)
    assert set(read) == {"def fourth", "def fifth"}  # the functions with no in-place idiom of their own
    read.clear()
    edited = source.replace("return 1", "return 2")
    result = analyze_source(edited, "f.py", cache=cache, fixes=False)
    assert read == ["def fifth"]
    assert _findings(result) == _findings(analyze_source(edited, "f.py", fixes=False))


def test_editing_a_helper_reanalyses_its_callers(runs):
    cache: dict = {}
    before = analyze_source(SOURCE, "f.py", cache=cache)
    assert _helper_finding(before) == (7, 25)  # t.mul_(2), reached through the call scale_(y)
    runs.clear()
    edited = SOURCE.replace("t.mul_(2)", "t = t * 2")
    result = analyze_source(edited, "f.py", cache=cache)
    assert set(runs) == {"scale_", "third"}
    assert _findings(result) == _findings(analyze_source(edited, "f.py"))
    assert _helper_finding(result) is None


def _helper_finding(result):
    """The line of the GG001 inside ``scale_`` and of the call that reaches it, or None."""
    found = [(d.line, r.line) for d in result.diagnostics if d.code == "GG001"
             for r in d.related if r.message.startswith("`scale_()` is called here")]
    assert len(found) <= 1
    return found[0] if found else None


def _everything(result):
    return [(d.span, d.code, d.severity, d.message, d.related, d.fix) for d in result.diagnostics]


def test_functions_that_only_moved_are_moved_not_reanalysed(runs):
    cache: dict = {}
    analyze_source(SOURCE, "f.py", cache=cache)
    runs.clear()
    edited = SOURCE.replace("def scale_(t):", "# a comment\n\ndef scale_(t):")
    result = analyze_source(edited, "f.py", cache=cache)
    assert runs == []
    assert _everything(result) == _everything(analyze_source(edited, "f.py"))
    assert _helper_finding(result) == (9, 27)  # t.mul_(2) and its call scale_(y), each two lines down


def test_a_caller_that_moved_away_from_its_helper_is_moved_part_by_part(runs):
    cache: dict = {}
    analyze_source(SOURCE, "f.py", cache=cache)
    runs.clear()
    edited = SOURCE.replace("def first():", "# a comment\ndef first():")  # between scale_ and third
    result = analyze_source(edited, "f.py", cache=cache)
    assert runs == []  # third moved one line, its helper scale_ did not: each line moves with its own part
    assert _everything(result) == _everything(analyze_source(edited, "f.py"))


def test_a_new_decorator_is_an_edit_of_its_function(runs):
    source = SOURCE.replace("def scale_(t):", "def scale_(t):  # helper")
    cache: dict = {}
    before = analyze_source(source, "f.py", cache=cache)
    assert any(code == "GG001" for _, code, _ in _findings(before))
    runs.clear()
    edited = source.replace("def scale_(t):", "@torch.no_grad()\ndef scale_(t):")
    result = analyze_source(edited, "f.py", cache=cache)
    assert "scale_" in runs and "third" in runs
    assert _everything(result) == _everything(analyze_source(edited, "f.py"))


@pytest.mark.parametrize("fixes", [True, False], ids=["fixes", "editor"])
def test_random_line_inserts_and_deletes_match_a_fresh_analysis(fixes):
    """Moved findings (messages, related lines, fixes) equal what a fresh analysis says, edit after edit.
    Without fixes (the editor's path), statements below a moved line keep their line numbers in the tree
    (``parsing.Layout``): the findings, and the fixes built on demand, are still those of a fresh analysis."""
    import random
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from bench_lsp import generate

    rng = random.Random(3)
    lines = generate(600).split("\n")
    cache: dict = {}
    analyze_source("\n".join(lines), "f.py", cache=cache)
    checked = 0
    for _ in range(40):
        i = rng.randrange(1, len(lines) - 1)
        candidate = list(lines)
        if rng.random() < 0.5:
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            candidate.insert(i, indent + rng.choice(["pass", "# note", "", "y_extra = 1"]))
        elif not lines[i].strip() or lines[i].strip().startswith("#"):
            del candidate[i]
        text = "\n".join(candidate)
        try:
            compile(text, "f.py", "exec")
        except SyntaxError:
            continue
        lines = candidate
        cached = analyze_source(text, "f.py", cache=cache, fixes=fixes)
        assert _everything(cached) == _everything(analyze_source(text, "f.py", fixes=fixes))
        if not fixes and checked % 5 == 0:  # the fixes built when asked for are those of `gradguard check`
            on_demand = cached.fixes.fixed(cached.diagnostics)
            assert [(d.span, d.code, d.fix) for d in on_demand] == \
                [(d.span, d.code, d.fix) for d in analyze_source(text, "f.py").diagnostics]
        checked += 1
    assert checked >= 20
    if not fixes:
        assert cache["parsed"].layout is not None  # the edits were made on a layout, not a full parse each time


def test_expressions_too_deep_to_analyse_are_reported_where_they_are_edit_after_edit():
    """The placeholders of the statements a reparse reuses are kept with the parse (``Parsed.skipped``), not
    found again by walking the tree: after every line insert or delete, above, inside or below statements
    with expressions too deep to analyse, and after keystrokes, the GG903s (and everything else) are those
    of a fresh analysis."""
    import random

    from gradguard import parsing
    from gradguard.bounds import MAX_EXPRESSION_DEPTH

    deep = " + ".join(["w"] * (MAX_EXPRESSION_DEPTH + 20))
    blocks = [SOURCE, f"def deep_one(w):\n    a = 1\n    z = {deep}\n    return z\n",
              f"TOTAL = {deep.replace('w', '1')}\n",
              f"class Deep:\n    def m(self, w):\n        b = 2\n        return {deep}\n",
              # A second copy with its own helper: a helper both copies called would get a fix that also edits the
              # other copy's call, which a cached fix keeps at its old line (a separate, known problem).
              SOURCE.replace("def ", "def again_").replace("scale_(y)", "again_scale_(y)").replace("import", "#")]
    lines = parsing.source_lines("\n\n".join(blocks))
    rng = random.Random(11)
    for fixes in (True, False):
        cache: dict = {}
        current = list(lines)
        analyze_source("\n".join(current), "f.py", cache=cache, fixes=fixes)
        for _ in range(30):
            i = rng.randrange(1, len(current) - 1)
            candidate = list(current)
            roll = rng.random()
            if roll < 0.4:
                indent = current[i][: len(current[i]) - len(current[i].lstrip())]
                candidate.insert(i, indent + rng.choice(["pass", "# note", ""]))
            elif roll < 0.7:  # a keystroke: no line moves, the statements below are reused as they are
                candidate[i] += "  # e"
            elif not current[i].strip() or current[i].strip() in ("pass", "# note", "a = 1", "b = 2"):
                del candidate[i]
            text = "\n".join(candidate)
            try:
                compile(text, "f.py", "exec")
            except SyntaxError:
                continue
            current = candidate
            cached = analyze_source(text, "f.py", cache=cache, fixes=fixes)
            assert _everything(cached) == _everything(analyze_source(text, "f.py", fixes=fixes))
            assert sum(d.code == "GG903" for d in cached.diagnostics) == 3
            fresh = parsing.parse_document(text).skipped
            kept = cache["parsed"]  # without fixes, the statements below a moved line keep their line numbers
            assert sorted((kept.text_line(p.lineno), p.col_offset) for p in kept.skipped) == \
                [(p.lineno, p.col_offset) for p in fresh]


def test_reparse_equals_a_full_parse_or_declines():
    """Keystrokes (characters typed or deleted inside a line) on real code: the spliced tree is exactly the
    full parse, positions included, or reparse declines (and a full parse decides)."""
    import ast
    import random
    import sys
    from pathlib import Path

    from gradguard import parsing

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from bench_lsp import generate

    rng = random.Random(5)
    text = generate(800) + "a = 1; b = 2\n@staticmethod\ndef g(): pass\n"
    lines = parsing.source_lines(text)
    previous = parsing.parse_document(text)
    spliced = declined = 0
    for _ in range(400):
        i = rng.randrange(len(lines))
        line = lines[i]
        at = rng.randrange(len(line) + 1)
        typed = rng.choice(["x", " ", "(", ")", ":", "#", "'", "1", ".", ","])
        edited = line[:at] + typed + line[at:] if rng.random() < 0.7 or not line else line[:at] + line[at + 1:]
        new_lines = lines[:i] + [edited] + lines[i + 1:]
        spliced_parse = parsing.reparse(new_lines, previous)
        going_on, refused = _checked_against_a_full_parse(spliced_parse, new_lines)
        spliced, declined = spliced + (not refused), declined + refused
        if going_on is not None:
            lines, previous = new_lines, going_on
    assert spliced > 100 and declined > 20


def test_reparse_of_inserted_and_deleted_lines_equals_a_full_parse_or_declines():
    """Lines inserted or deleted anywhere in real code (Enter, a deleted line, a pasted block): the spliced
    tree is exactly the full parse, positions of every statement below included, or reparse declines."""
    import ast
    import random
    import sys
    from pathlib import Path

    from gradguard import parsing

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from bench_lsp import generate

    rng = random.Random(7)
    text = generate(600) + "a = 1; b = 2\n@staticmethod\ndef g(): pass\n"
    lines = parsing.source_lines(text)
    previous = parsing.parse_document(text)
    spliced = declined = 0
    for _ in range(150):
        i = rng.randrange(len(lines))
        if rng.random() < 0.5:
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            added = [indent + rng.choice(["# edit", "x = 1", "", "pass", "y = (", "    z = 2"])
                     for _ in range(rng.choice([1, 1, 2, 3]))]
            new_lines = lines[:i] + added + lines[i:]
        else:
            new_lines = lines[:i] + lines[i + rng.choice([1, 1, 2]):]
        spliced_parse = parsing.reparse(new_lines, previous)
        going_on, refused = _checked_against_a_full_parse(spliced_parse, new_lines)
        spliced, declined = spliced + (not refused), declined + refused
        if going_on is not None:
            lines, previous = new_lines, going_on
    assert spliced > 40 and declined > 10


def test_reparse_after_lines_were_added_or_removed_inside_one_statement():
    """Inserted and deleted lines inside a function re-parse it and what follows it (their positions moved),
    reusing what is above; without positions after the change (a fix checking its own function), only the
    function is parsed again; a change between top-level statements declines."""
    import ast

    from gradguard import parsing

    old = "import torch\n\n\ndef f():\n    a = 1\n    b = 2\n    return a\n\n\ndef g():\n    return 3\n"
    previous = parsing.parse_document(old)
    for new in (old.replace("    b = 2\n", "    b = 2\n    c = 3\n"), old.replace("    b = 2\n", "")):
        lines = parsing.source_lines(new)
        moved = parsing.reparse(lines, previous).tree
        assert ast.dump(moved, include_attributes=True) == ast.dump(ast.parse(new), include_attributes=True)
        assert moved.body[0] is previous.tree.body[0]  # above the change: reused as it was
        tree = parsing.reparse(lines, previous, positions_after=False).tree
        assert ast.dump(tree.body[1], include_attributes=True) == ast.dump(ast.parse(new).body[1], include_attributes=True)
        assert tree.body[2] is previous.tree.body[2]  # reused as it was
    between = old.replace("\n\ndef g", "\nx = 1\n\ndef g")
    assert parsing.reparse(parsing.source_lines(between), previous, positions_after=False) is None
    # With positions after it, a change between statements parses from the statement before it to the end.
    for new in (between, old.replace("\n\ndef g", "\n\n\ndef g"), old.replace("\n\ndef g", "\n# x\ndef g")):
        tree = parsing.reparse(parsing.source_lines(new), previous).tree
        assert ast.dump(tree, include_attributes=True) == ast.dump(ast.parse(new), include_attributes=True)
        assert tree.body[0] is previous.tree.body[0]


GLOBALS = textwrap.dedent('''
    import torch

    BIAS = torch.zeros(3, requires_grad=True)
    STEP = 0


    def shift():
        BIAS.add_(0.1)


    def other():
        x = torch.zeros(3, requires_grad=True)
        x += 1
''')


def test_a_function_that_reads_a_global_follows_the_statement_that_binds_it(runs):
    """Editing the binding of a module variable re-analyses the functions that read it (and only those);
    an edit elsewhere at the top level does not."""
    cache: dict = {}
    before = analyze_source(GLOBALS, "g.py", cache=cache)
    assert {(line, code) for line, code, _ in _findings(before)} >= {(9, "GG002"), (14, "GG002")}
    runs.clear()
    edited = GLOBALS.replace("STEP = 0", "STEP = 1")
    analyze_source(edited, "g.py", cache=cache)
    assert "shift" not in runs and "other" not in runs
    runs.clear()
    edited = GLOBALS.replace("BIAS = torch.zeros(3, requires_grad=True)", "BIAS = torch.zeros(3)")
    result = analyze_source(edited, "g.py", cache=cache)
    assert "shift" in runs and "other" not in runs
    assert _findings(result) == _findings(analyze_source(edited, "g.py"))
    assert not any(line == 9 for line, _, _ in _findings(result))


MODEL = textwrap.dedent('''
    import torch
    import torch.nn as nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            h = torch.sigmoid(self.fc(x))
            h += 1
            return h
''')


def test_a_keystroke_in_a_method_reuses_the_instance_its_class_builds(monkeypatch):
    """`self` of a method is the instance `__init__` builds; an edit inside another method does not build it
    again (a model's construction can be most of a file's analysis), and the findings stay those of a fresh run."""
    built = []
    real = engine.Interpreter.instantiate

    def counting(self, info, *args, **kwargs):
        built.append(info.name)
        return real(self, info, *args, **kwargs)

    monkeypatch.setattr(engine.Interpreter, "instantiate", counting)
    cache: dict = {}
    analyze_source(MODEL, "m.py", cache=cache)
    assert "Net" in built
    built.clear()
    edited = MODEL.replace("h += 1", "h += 2")
    result = analyze_source(edited, "m.py", cache=cache)
    assert built == []
    assert _findings(result) == _findings(analyze_source(edited, "m.py"))
    built.clear()
    analyze_source(edited.replace("nn.Linear(4, 4)", "nn.Linear(4, 5)"), "m.py", cache=cache)
    assert "Net" in built  # the class's own text changed: built again


def test_a_cached_fix_that_edits_another_caller_is_built_again_after_a_line_moves_it():
    """A helper's fix that also rebinds its other callers (``y = scale_(y)`` in ``fourth``) edits lines outside
    the cached function's key: after a line is inserted above ``fourth``, the cached fix must not keep the old
    line of that edit (it kept the old line where a fresh analysis gives the next)."""
    fourth = "\n\ndef fourth():\n    w = torch.randn(3, requires_grad=True)\n    y = torch.exp(w)\n    scale_(y)\n" \
             "    y.sum().backward()\n"
    src = SOURCE + fourth  # `scale_` is called by `third` and `fourth`
    edited = src.replace("\n\ndef fourth", "\n\n# moved\ndef fourth")
    cache: dict = {}
    first = analyze_source(src, "f.py", cache=cache)
    assert any(d.fix is not None and len({e.line for e in d.fix.edits}) > 2 for d in first.diagnostics)
    cached = analyze_source(edited, "f.py", cache=cache)
    fresh = analyze_source(edited, "f.py")
    assert [d.fix for d in cached.diagnostics] == [d.fix for d in fresh.diagnostics]


def test_reparse_changed_only_keeps_every_statement_text_and_position_or_declines():
    """Lines inserted and deleted and keystrokes, on real code: only the changed statements are parsed again,
    the others keep their line numbers (``parsing.Layout``); each statement, moved to the text's lines its
    layout says, is exactly the full parse's, and the tree's lines hold its text; or the reparse declines."""
    import ast
    import copy
    import random
    import sys
    from pathlib import Path

    from gradguard import parsing

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from bench_lsp import generate

    def at_text_lines(parsed: parsing.Parsed) -> str:
        body = []
        for i, stmt in enumerate(parsed.tree.body):
            moved = copy.deepcopy(stmt)
            if parsed.layout is not None:
                first, _, text_first = parsed.layout.blocks[i]
                ast.increment_lineno(moved, text_first - first)
            body.append(moved)
        return ast.dump(ast.Module(body=body, type_ignores=[]), include_attributes=True)

    rng = random.Random(13)
    text = generate(500) + "a = 1; b = 2\n@staticmethod\ndef g(): pass\n"
    lines = parsing.source_lines(text)
    previous = parsing.parse_document(text)
    spliced = declined = with_layout = 0
    for _ in range(250):
        i = rng.randrange(len(lines))
        roll = rng.random()
        if roll < 0.35:
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            added = [indent + rng.choice(["# edit", "x = 1", "", "pass", "y = (", "    z = 2", "@deco"])
                     for _ in range(rng.choice([1, 1, 2, 3]))]
            new_lines = lines[:i] + added + lines[i:]
        elif roll < 0.6:
            new_lines = lines[:i] + lines[i + rng.choice([1, 1, 2]):]
        else:
            at = rng.randrange(len(lines[i]) + 1)
            new_lines = lines[:i] + [lines[i][:at] + rng.choice(["x", " ", "(", ":", "#", "'", "."]) + lines[i][at:]] \
                + lines[i + 1:]
        spliced_parse = parsing.reparse_changed_only(new_lines, previous)
        going_on, refused = _checked_against_a_full_parse(spliced_parse, new_lines, at_text_lines)
        spliced, declined = spliced + (not refused), declined + refused
        if spliced_parse is not None:
            with_layout += spliced_parse.layout is not None
            for stmt in spliced_parse.tree.body:
                first = parsing.first_line(stmt)
                text_first, text_last = spliced_parse.text_line(first), spliced_parse.text_line(stmt.end_lineno)
                assert spliced_parse.tree_lines[first - 1:stmt.end_lineno] == new_lines[text_first - 1:text_last]
        if going_on is not None:
            lines, previous = new_lines, going_on
    assert spliced > 80 and declined > 20 and with_layout > 60


def test_a_later_class_of_the_same_name_still_wins_after_the_earlier_one_was_parsed_again():
    """A class whose lines were parsed again gets fresh line numbers past the others' (``parsing.Layout``), so
    which definition of a name comes later is told by the top-level statements' order, not their lines."""
    source = textwrap.dedent('''
        import torch
        import torch.nn as nn


        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.act = nn.ReLU()


        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.act = nn.ReLU(inplace=True)


        def train():
            x = torch.randn(3, requires_grad=True)
            h = torch.sigmoid(x)
            Block().act(h)
            h.sum().backward()
    ''')
    cache: dict = {}
    first = analyze_source(source, "f.py", cache=cache, fixes=False)
    assert [d.code for d in first.diagnostics] == ["GG005"]  # the later Block: ReLU(inplace=True)
    edited = source.replace("        super().__init__()\n        self.act = nn.ReLU()\n",
                            "        super().__init__()\n        self.extra = 1\n        self.act = nn.ReLU()\n")
    again = analyze_source(edited, "f.py", cache=cache, fixes=False)
    blocks = cache["parsed"].layout.blocks
    assert blocks[2][0] > blocks[3][0]  # the earlier Block's lines are now past the later one's
    assert _everything(again) == _everything(analyze_source(edited, "f.py", fixes=False))
    assert [d.code for d in again.diagnostics] == ["GG005"]


def _checked_against_a_full_parse(spliced, new_lines: list[str], shown=None):
    """``spliced`` (a reparse of ``new_lines``, or None when it declined) checked against the full parse of the
    text, compared as ``shown`` gives it (the tree itself by default): the parse to go on editing from (None when
    the text does not parse), and whether the reparse declined."""
    import ast

    from gradguard import parsing

    new_text = "\n".join(new_lines)
    full = parsing.parse(new_text)
    if spliced is not None:
        assert not isinstance(full, parsing.SyntaxProblem)
        seen = shown(spliced) if shown is not None else ast.dump(spliced.tree, include_attributes=True)
        assert seen == ast.dump(full, include_attributes=True)
    if isinstance(full, parsing.SyntaxProblem):
        return None, spliced is None
    return spliced or parsing.parse_document(new_text), spliced is None
